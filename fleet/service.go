package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/attest"
)

// Config is the part of fleetd's configuration the domain needs.
type Config struct {
	// FleetdURL is the base URL agents and nodes reach fleetd at; it goes into hardwareMap.
	FleetdURL string
	// BootCheckMissingAfter is how old an active device's last accepted boot check may be before
	// fleetd reports it missing (docs/design.md §5: two hours).
	BootCheckMissingAfter time.Duration
	// ConfigTTL is how long a provision's configuration waits for its one fetch after the
	// attestation (config_delivery.pending_ttl); 0 means DefaultConfigTTL.
	ConfigTTL time.Duration
	// ServiceUser is fleetd's own NetBox user (netbox.service_user): only its saves of a device's
	// fields can vouch for their values (docs/design.md §9, "Sealed fields"). Empty: nobody can be
	// told from fleetd, the change log is not read, and the seal alone decides (a test setting;
	// fleetd serve requires it).
	ServiceUser string
	// InventoryBootCheckWindow is how old an active device's last accepted boot check may be
	// before the inventory check says its boot checks stopped (inventory.boot_check_window); 0
	// means DefaultBootCheckWindow.
	InventoryBootCheckWindow time.Duration
	// ChangeLogRetention is how long NetBox keeps its change log (CHANGELOG_RETENTION): facts
	// older than that are stale, since a declaration change before it cannot be seen; 0 means
	// DefaultChangeLogRetention.
	ChangeLogRetention time.Duration
	// AfterSweep, when set, runs after each pass over the whole fleet (the periodic reconcile
	// with its onInventory, and the inventory check), once the pass's listing is garbage:
	// fleetd serve returns the pass's working set to the operating system there
	// (docs/operate.md, "Memory").
	AfterSweep func()
}

// DefaultConfigTTL is how long a configuration waits for its fetch when Config sets no TTL: an
// install Workflow (one hour by default) plus Talos's three hours of retries.
const DefaultConfigTTL = 4 * time.Hour

// Deps are the service's collaborators, wired by main.
type Deps struct {
	Inventory Inventory
	ChangeLog ChangeLog // may be nil: then only decisions and webhooks repair others' writes of fleetd's fields
	Seal      *SealKeys // the keys of the seal over the fields fleetd owns (seal.go); required
	Installer Installer
	Catalog   Catalog
	Renderer  Renderer // renders configurations: checked at attestation, served at fetch
	Attest    Attestation
	Clock     Clock
	Random    Random
	Logger    zerolog.Logger
	Registry  prometheus.Registerer
	// DeviceRegistry takes the per-device series (named by device: docs/operate.md, "Metrics and
	// alerts"), which fleetd serves only behind the metrics token; nil: they are not exported.
	DeviceRegistry prometheus.Registerer
}

// Service is the orchestration of docs/design.md §1: it takes requests from NetBox, drives them through the
// lifecycle, and records every decision in NetBox. It keeps no state of its own beyond the
// per-device locks, which only spare it conflicting writes, and the address index, a cache of
// NetBox that decides nothing: every decision is a conditional write in NetBox, so several
// instances may serve at once (docs/design.md §9).
type Service struct {
	*core
	Enrollment *Enrollment
	Delivery   *Delivery
	BootChecks *BootChecks
	cfg        Config
	inst       Installer
	catalog    Catalog
	rnd        Random
	renderer   Renderer
	attest     Attestation
	addrs      *addrIndex // where a configuration fetch finds its device (addrindex.go)
	changes    ChangeLog
	logMark    changeLogMark // where the next reconcile reads the change log from (changelog.go)
	refusals   *lastRefusals
	queued     sync.Map          // "id request action": queued requests already journaled (noteQueued)
	boots      *attest.BootCache // the last replayed boot of each node (bootcheck.go)
	bootIDs    *nameIndex        // the device id of each name a boot check found (bootcheck.go)

	// receiptRefusals keeps the refused receipts already journaled (receipt.go).
	receiptRefusals journaledReceipts
}

// NewService checks the dependencies and builds the service.
func NewService(cfg Config, deps Deps) (*Service, error) {
	switch {
	case deps.Inventory == nil:
		return nil, errors.New("new service: no inventory")
	case deps.Installer == nil:
		return nil, errors.New("new service: no installer")
	case deps.Clock == nil:
		return nil, errors.New("new service: no clock")
	case deps.Random == nil:
		return nil, errors.New("new service: no randomness")
	case deps.Seal == nil:
		return nil, errors.New("new service: no seal keys for the fields fleetd owns")
	case cfg.FleetdURL == "":
		return nil, errors.New("new service: no fleetd URL for the agents")
	}
	if cfg.BootCheckMissingAfter <= 0 {
		cfg.BootCheckMissingAfter = 2 * time.Hour
	}
	if cfg.ConfigTTL < 0 {
		return nil, fmt.Errorf("new service: configuration TTL %s is negative", cfg.ConfigTTL)
	}
	if cfg.ConfigTTL == 0 {
		cfg.ConfigTTL = DefaultConfigTTL
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, deps.DeviceRegistry, deps.Clock)
	if err == nil {
		err = m.seals.atZero(deps.Seal)
	}
	if err != nil {
		return nil, fmt.Errorf("new service: %w", err)
	}
	addrs := newAddrIndex()
	inv := trustedInventory{Inventory: cappedInventory{indexedInventory{Inventory: deps.Inventory, idx: addrs}}, keys: deps.Seal, self: cfg.ServiceUser}
	c := &core{inv: inv, clock: deps.Clock, log: deps.Logger, metrics: m, keys: deps.Seal}
	s := &Service{core: c, cfg: cfg, inst: deps.Installer,
		catalog: deps.Catalog, rnd: &lockedReader{r: deps.Random}, renderer: deps.Renderer, attest: deps.Attest,
		addrs: addrs, changes: deps.ChangeLog, refusals: &lastRefusals{}}
	s.Enrollment = &Enrollment{core: c, catalog: deps.Catalog, attest: deps.Attest, rnd: s.rnd, renderer: deps.Renderer,
		refusals: s.refusals, configTTL: cfg.ConfigTTL}
	s.Delivery = &Delivery{core: c, catalog: deps.Catalog, renderer: deps.Renderer, addrs: addrs}
	s.BootChecks = &BootChecks{core: c, catalog: deps.Catalog, attest: deps.Attest,
		boots: attest.NewBootCache(bootCacheSize), bootIDs: newNameIndex(bootCacheSize)}
	m.bootChecks.times = func(d Device) (CertTimes, CertTimes) { return certTimes(deps.Attest.Issuer, d) }
	m.bootChecks.missingAfter = cfg.BootCheckMissingAfter
	m.bootChecks.class = func(declared string) string { return countedClass(deps.Catalog, declared) }
	m.bootChecks.classes = deps.Catalog.Names()
	return s, nil
}

// countedClass is a declared class as the fleet-wide counts label it: a class of the catalogue,
// or "unknown" (an owner's typo must not add a series).
func countedClass(catalog Catalog, declared string) string {
	if _, ok := catalog.Class(declared); ok {
		return declared
	}
	return "unknown"
}

// lockedReader serialises reads of a randomness source that is not safe for concurrent use (a
// seeded test reader); crypto/rand.Reader pays one uncontended lock.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

// Outcome is what one decision did, for the decision log line the adapter writes (STYLE habit 10).
type Outcome struct {
	DeviceID int64
	Device   string
	Class    string
	Action   Action
	Step     string // claim, install, workflow, deliver, ...
	Result   string // accepted, rejected, waiting, succeeded, failed, nothing-to-do, ...
	Check    string // the verification that refused, when one did
	Detail   string
}

// maxLoggedName caps a device name in the log: a claimed one can be as long as the request body,
// and NetBox's own names are at most 64 characters.
const maxLoggedName = 64

// MarshalZerologObject writes the outcome with fleetd's constant log keys.
func (o Outcome) MarshalZerologObject(e *zerolog.Event) {
	e.Str("device", capText(o.Device, maxLoggedName)).Int64("device_id", o.DeviceID).Str("class", o.Class).
		Str("action", string(o.Action)).Str("step", o.Step).Str("outcome", o.Result)
	if o.Check != "" {
		e.Str("check", o.Check)
	}
	if o.Detail != "" {
		e.Str("detail", o.Detail)
	}
}

func outcomeFor(d Device, action Action, step, result string) Outcome {
	return Outcome{DeviceID: d.ID, Device: d.Name, Class: d.Declared.Class, Action: action, Step: step, Result: result}
}

// maxConflicts bounds how often one decision re-reads a device that changed under it.
const maxConflicts = 5

// Reconcile re-reads one device and takes the next step its request needs, if any. A webhook, the
// periodic reconcile, a Workflow event and an operator all end here, so every trigger runs the
// same code path and a duplicate trigger finds nothing left to do.
func (s *Service) Reconcile(ctx context.Context, id int64) (Outcome, error) {
	return s.reconcile(ctx, id, nil)
}

// reconcile is Reconcile with the Workflows as a listing made before (nil: read each one).
func (s *Service) reconcile(ctx context.Context, id int64, listed workflowListing) (Outcome, error) {
	unlock := s.locks.lock(id)
	defer unlock()
	start := s.clock.Now()
	defer func() { s.metrics.reconcileSeconds.Observe(s.clock.Now().Sub(start).Seconds()) }()

	for attempt := 0; ; attempt++ {
		d, err := s.inv.Device(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return Outcome{DeviceID: id, Step: "read", Result: "unknown-device"}, nil
		}
		if err != nil {
			return Outcome{DeviceID: id, Step: "read", Result: "error"}, fmt.Errorf("read device %d: %w: %w", id, ErrInventory, err)
		}
		if d, err = s.vouched(ctx, d); err != nil {
			return outcomeFor(d, RequestAction(d.Owned.Request), "owned-fields", "refused"), err
		}
		out, err := s.advance(ctx, d, listed)
		if errors.Is(err, ErrConflict) && attempt < maxConflicts {
			s.metrics.conflicts.Inc()
			continue
		}
		return out, err
	}
}

// advance takes the next step for a device as NetBox has it now.
func (s *Service) advance(ctx context.Context, d Device, listed workflowListing) (Outcome, error) {
	if !d.Owned.State.Terminal() {
		return s.follow(ctx, d, listed)
	}
	action := requested(d)
	if action == ActionNone {
		return outcomeFor(d, ActionNone, "idle", "nothing-to-do"), nil
	}
	if problems := s.problems(d, action); len(problems) > 0 {
		return s.reject(ctx, d, action, problems)
	}
	return s.accept(ctx, d, action)
}

// requested is the action the owner asks for on a device with no running request: desired_action,
// or retirement when the status is decommissioning and the last request was not a retirement.
// On a decommissioning device, wipe means "retire again" (the way to retry a failed retirement).
func requested(d Device) Action {
	switch {
	case d.Declared.DesiredAction != ActionNone:
		if d.Status == StatusDecommissioning && d.Declared.DesiredAction == ActionWipe {
			return ActionRetire
		}
		return d.Declared.DesiredAction
	case d.Status == StatusDecommissioning && d.Owned.State != StateRetired &&
		RequestAction(d.Owned.Request) != ActionRetire:
		return ActionRetire
	}
	return ActionNone
}

// NeedsAttention reports whether Reconcile would do anything for the device: the periodic
// reconcile re-reads only those.
func NeedsAttention(d Device) bool {
	return !d.Owned.State.Terminal() || requested(d) != ActionNone
}

func (s *Service) problems(d Device, action Action) []string {
	return problemsOf(s.checks(d, action))
}

// checks is every check the claim makes of a request: the action itself, then the declaration
// (Device.Checks). An action that is not a request is the only check.
func (s *Service) checks(d Device, action Action) []DeclarationCheck {
	switch {
	case !validAction(action):
		return []DeclarationCheck{{Name: "action", Problem: fmt.Sprintf("desired_action %q is not one of provision, attest, wipe", action)}}
	case action == ActionRetire && d.Status != StatusDecommissioning:
		return []DeclarationCheck{{Name: "action", Problem: "desired_action retire is not a request: set the device status to decommissioning to retire it"}}
	}
	return d.Checks(action, s.catalog)
}

// ReconcileAll lists every device and reconciles those that need attention, so a lost webhook
// delays a request but never loses it (docs/design.md §2). It reads NetBox's change log for the
// devices whose fields other users wrote (their webhook may have been lost), lists the devices,
// and checks those first (changelog.go), so that a written-back request is not taken again;
// then every listed device whose seal fails, or
// that is not sealed with the signing key yet, is read with its change log, repaired or sealed
// (trust.go). It returns the listed devices for the callers that derive other state from the
// inventory (Kea reservations, boot-check ages).
func (s *Service) ReconcileAll(ctx context.Context) ([]Device, error) {
	var errs []error
	logged, err := s.readLoggedWrites(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	devices, err := s.inv.Devices(ctx)
	if err != nil {
		s.metrics.reconcileRuns.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("list devices for reconcile: %w: %w", ErrInventory, err)
	}
	s.metrics.bootChecks.observe(devices)
	s.metrics.observePending(devices, s.clock.Now())
	s.metrics.observeSeals(devices, s.keys, s.brake.observe(devices))
	s.metrics.receipts.observe(devices)
	checked, err := s.checkLoggedWrites(ctx, logged)
	if err != nil {
		errs = append(errs, err)
	}
	listed := s.listWorkflows(ctx, devices)
	for _, d := range devices {
		if !NeedsAttention(d) && !needsSealCheck(d, s.keys.Signing(), checked) {
			continue
		}
		out, err := s.reconcile(ctx, d.ID, listed)
		s.logOutcome(out, err, "reconcile")
		if err != nil {
			errs = append(errs, err)
		}
	}
	result := "ok"
	if len(errs) > 0 {
		result = "error"
	}
	s.metrics.reconcileRuns.WithLabelValues(result).Inc()
	s.pruneWorkflows(ctx, devices)
	return devices, errors.Join(errs...)
}

// Run reconciles every interval until ctx ends. onInventory, when set, receives each listing.
func (s *Service) Run(ctx context.Context, interval time.Duration, onInventory func(context.Context, []Device)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		devices, err := s.ReconcileAll(ctx)
		if err != nil {
			s.log.Warn().Err(err).Msg("periodic reconcile incomplete; the next run retries")
		}
		if devices != nil && onInventory != nil {
			onInventory(ctx, devices)
		}
		s.afterSweep()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// afterSweep runs Config.AfterSweep, if any.
func (s *Service) afterSweep() {
	if s.cfg.AfterSweep != nil {
		s.cfg.AfterSweep()
	}
}

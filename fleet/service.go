package fleet

import (
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
	// NodeAccess is the cluster authorization webhook's policy (cluster.authorization).
	NodeAccess NodeAccessConfig
	// JoinDeadline is how long a joining node has, from its delivery, until its Node is Ready
	// (cluster.join_deadline); 0 means DefaultJoinDeadline.
	JoinDeadline time.Duration
	// AfterSweep, when set, runs after each pass over the whole fleet (the periodic reconcile
	// with its onListing, and the inventory check), once the pass's listing is garbage:
	// fleetd serve returns the pass's working set to the operating system there
	// (docs/operate.md, "Memory").
	AfterSweep func()
}

// DefaultConfigTTL is how long a configuration waits for its fetch when Config sets no TTL: an
// install Workflow (one hour by default) plus Talos's three hours of retries.
const DefaultConfigTTL = 4 * time.Hour

// DefaultJoinDeadline is how long a joining node has from its delivery to its Node Ready when
// Config sets none: a Talos first boot pulls its images and starts its kubelet within minutes.
const DefaultJoinDeadline = 30 * time.Minute

// Deps are the service's collaborators, wired by main.
type Deps struct {
	NetBox    NetBox
	ChangeLog ChangeLog // may be nil: then only decisions and webhooks repair others' writes of fleetd's fields
	Seal      *SealKeys // the keys of the seal over the fields fleetd owns (seal.go); required
	Installer Installer
	Catalog   Catalog
	Renderer  Renderer // renders configurations: checked at attestation, served at fetch
	Attest    Attestation
	SPIRE     SPIRE // may be nil: no SPIRE server configured, no agent banned (docs/operate.md, "SPIRE")
	Clock     Clock
	Random    Random
	Logger    zerolog.Logger
	Registry  prometheus.Registerer
	// Cluster is the workload cluster (cluster.kubeconfig); nil when fleetd has none, and then
	// no class may join Kubernetes: an attestation for one fails (docs/operate.md, "The workload
	// cluster").
	Cluster Cluster
	// DeviceRegistry takes the per-device series (named by device: docs/operate.md, "Metrics and
	// alerts"), which fleetd serves only behind the metrics token; nil: they are not exported.
	DeviceRegistry prometheus.Registerer
}

// Service is the orchestration of docs/design.md §1, one type per use case (docs/design.md, "The
// domain by use case"): it takes requests from NetBox, drives them through the lifecycle, and
// records every decision in NetBox. The use cases share one core (core.go) and each holds only
// the ports it calls; callers take the use case they need, not the whole. It keeps no state of
// its own beyond the per-device locks, which only spare it conflicting writes, and caches of
// NetBox that decide nothing (the address index, the last replayed boots): every decision is a
// conditional write in NetBox, so several instances may serve at once (docs/design.md §9).
type Service struct {
	Enrollment *Enrollment
	Delivery   *Delivery
	BootChecks *BootChecks
	Requests   *Requests
	Review     *Review
	// Membership decides the kubelets' CSRs in the workload cluster; fleetd serve runs it only
	// when Deps.Cluster is set.
	Membership *Membership
	Views      *Views
	NodeAccess *NodeAccess
}

// NewService checks the dependencies and builds every use case on one core.
func NewService(cfg Config, deps Deps) (*Service, error) {
	switch {
	case deps.NetBox == nil:
		return nil, errors.New("new service: no NetBox (Deps.NetBox)")
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
	if cfg.JoinDeadline < 0 {
		return nil, fmt.Errorf("new service: join deadline %s is negative", cfg.JoinDeadline)
	}
	if cfg.JoinDeadline == 0 {
		cfg.JoinDeadline = DefaultJoinDeadline
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
	view := newNodeView()
	nb := trustedNetBox{NetBox: cappedNetBox{indexedNetBox{NetBox: deps.NetBox, idx: addrs}}, keys: deps.Seal, self: cfg.ServiceUser, view: view}
	c := &core{netbox: nb, clock: deps.Clock, log: deps.Logger, metrics: m, keys: deps.Seal}
	rnd := &lockedReader{r: deps.Random}
	refusals := &lastRefusals{}
	afterSweep := cfg.AfterSweep
	if afterSweep == nil {
		afterSweep = func() {}
	}
	s := &Service{}
	s.Enrollment = &Enrollment{core: c, catalog: deps.Catalog, attest: deps.Attest, rnd: rnd, renderer: deps.Renderer,
		cluster: deps.Cluster, refusals: refusals, configTTL: cfg.ConfigTTL, joinDeadline: cfg.JoinDeadline}
	s.Membership = &Membership{core: c, cluster: deps.Cluster, joinDeadline: cfg.JoinDeadline}
	s.Delivery = &Delivery{core: c, catalog: deps.Catalog, renderer: deps.Renderer, addrs: addrs}
	s.BootChecks = &BootChecks{core: c, catalog: deps.Catalog, attest: deps.Attest,
		boots: attest.NewBootCache(bootCacheSize), bootIDs: newNameIndex(bootCacheSize)}
	s.Requests = &Requests{core: c, inst: deps.Installer, catalog: deps.Catalog, rnd: rnd, fleetdURL: cfg.FleetdURL,
		refusals: refusals, afterSweep: afterSweep, spire: deps.SPIRE,
		nodes:   &nodeCleanup{core: c, cluster: deps.Cluster, metrics: m.nodeCleanups},
		foreign: &foreignWrites{core: c, changes: deps.ChangeLog, serviceUser: cfg.ServiceUser, retention: cfg.changeLogRetention()}}
	s.Review = &Review{core: c, inst: deps.Installer, catalog: deps.Catalog, attest: deps.Attest, changes: deps.ChangeLog,
		fleetdURL: cfg.FleetdURL, serviceUser: cfg.ServiceUser, window: cfg.inventoryWindow(),
		retention: cfg.changeLogRetention(), afterSweep: afterSweep}
	s.Views = &Views{core: c, inst: deps.Installer, issuer: deps.Attest.Issuer, missingAfter: cfg.BootCheckMissingAfter}
	if s.NodeAccess, err = newNodeAccess(c, view, cfg.NodeAccess, m.nodeAccess); err != nil {
		return nil, fmt.Errorf("new service: %w", err)
	}
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

// Outcome is what one decision did, for the decision log line the adapter writes (docs/operate.md, "Endpoints").
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

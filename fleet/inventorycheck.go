package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The inventory check (docs/design.md §10): for each fleet device, what the owner declares in
// NetBox against what fleetd last learned of the machine (fleet_facts) and what fleetd itself
// recorded (last_boot_check, the certificates of fleet_identity). It reads, and writes nothing.
//
// Trust: proved facts were verified by fleetd under its own nonce; claimed facts (disks, MAC,
// SMBIOS UUID) are what the machine's agent said, so a difference in them shows that the machine
// changed or lies, never that it is what it claims.

// DifferenceKind names one way NetBox and the machine disagree (the metric's kind label).
type DifferenceKind string

const (
	DiffDiskNotFound      DifferenceKind = "disk_not_found"      // the declared disk_serial is not among the disks the machine reported
	DiffDiskTwice         DifferenceKind = "disk_found_twice"    // the machine reported the declared disk_serial on more than one disk
	DiffMAC               DifferenceKind = "mac_changed"         // the machine reported a MAC NetBox does not declare
	DiffUUID              DifferenceKind = "uuid_changed"        // the machine's SMBIOS UUID is not the one its identity was issued for
	DiffEK                DifferenceKind = "ek_changed"          // the proved EK is not declared, or not the one its identity was issued for
	DiffTPM               DifferenceKind = "tpm_mismatch"        // tpm or ek_certificate declares a TPM the machine does not have
	DiffBootChecksStopped DifferenceKind = "boot_checks_stopped" // an active device's last accepted boot check is older than the window
	DiffCertExpiring      DifferenceKind = "cert_expiring"       // a current certificate is close to its NotAfter and was not renewed
	DiffFactsUnreadable   DifferenceKind = "facts_unreadable"    // fleet_facts holds a value fleetd cannot read
)

// DifferenceKinds are every kind, in the order a report lists them.
var DifferenceKinds = []DifferenceKind{DiffDiskNotFound, DiffDiskTwice, DiffMAC, DiffUUID, DiffEK, DiffTPM,
	DiffBootChecksStopped, DiffCertExpiring, DiffFactsUnreadable}

// Difference is one way a device's declaration and its evidence disagree.
type Difference struct {
	Kind   DifferenceKind
	Detail string    // one sentence: what NetBox declares, what the evidence says, what to do
	At     time.Time // when the evidence was recorded
	Source string    // the evidence: enrollment, boot-check (fleet_facts), last_boot_check, certificate
}

// InventoryResult is one device's verdict.
type InventoryResult string

const (
	InventoryAgrees  InventoryResult = "agrees"   // nothing differs
	InventoryDiffers InventoryResult = "differs"  // at least one Difference
	InventoryStale   InventoryResult = "stale"    // nothing differs, but facts older than the declaration were not compared
	InventoryNoFacts InventoryResult = "no-facts" // fleetd has no facts of the machine: only its own records were compared
)

// StaleFacts is a half of a device's facts that was not compared: the declaration changed after
// it was learned, so it says nothing about the declaration as it is now.
type StaleFacts struct {
	Half       string    // "proved" or "claimed"
	Seen       time.Time // when the facts were last seen
	DeclaredAt time.Time // the declaration change that came after
	By         string    // the NetBox user who made it
}

// InventoryDevice is the check of one device.
type InventoryDevice struct {
	Device      string
	Class       string
	Result      InventoryResult
	Differences []Difference
	Stale       []StaleFacts
	// DeclaredAt is the device's last declaration change the change log shows after its oldest
	// facts, zero when there was none.
	DeclaredAt time.Time
}

// InventoryReport is one inventory check.
type InventoryReport struct {
	CheckedAt       time.Time
	BootCheckWindow time.Duration
	Devices         []InventoryDevice
}

// Differs reports whether any device differs.
func (r InventoryReport) Differs() bool {
	return slices.ContainsFunc(r.Devices, func(d InventoryDevice) bool { return len(d.Differences) > 0 })
}

// Count is how many differences of each kind the report holds (every kind, zero included).
func (r InventoryReport) Count() map[DifferenceKind]int {
	out := map[DifferenceKind]int{}
	for _, k := range DifferenceKinds {
		out[k] = 0
	}
	for _, d := range r.Devices {
		for _, diff := range d.Differences {
			out[diff.Kind]++
		}
	}
	return out
}

// Defaults of the inventory check (docs/operate.md, inventory.*).
const (
	// DefaultBootCheckWindow is three missed hourly boot checks.
	DefaultBootCheckWindow = 3 * time.Hour
	// DefaultChangeLogRetention is NetBox's CHANGELOG_RETENTION default (90 days): a declaration
	// change older than that is gone from the change log.
	DefaultChangeLogRetention = 90 * 24 * time.Hour
)

// ErrChangeLog is NetBox's change log that could not be read (an ErrNetBoxUnavailable): the inventory
// check cannot tell stale facts from differences without it, so it does not check.
var ErrChangeLog = fmt.Errorf("%w: its change log could not be read", ErrNetBoxUnavailable)

// ErrNoChangeLog is fleetd wired without NetBox's change log: the check cannot tell stale facts
// from differences, so it does not check.
var ErrNoChangeLog = errors.New("fleetd reads no change log, so it cannot tell facts older than a declaration change")

// InventoryCheck checks the named devices, or with none every fleet device (one with a
// fleet_class). An unknown name is refused; a NetBox that cannot be read is ErrNetBoxUnavailable.
func (s *Review) InventoryCheck(ctx context.Context, names []string) (rep InventoryReport, err error) {
	if len(names) == 0 {
		defer func() { s.observeInventory(rep, err) }()
	}
	if s.changes == nil {
		return InventoryReport{}, ErrNoChangeLog
	}
	devices, err := s.inventoryDevices(ctx, names)
	if err != nil {
		return InventoryReport{}, err
	}
	now := s.core.clock.Now().UTC()
	since := now
	for _, d := range devices {
		for _, t := range []time.Time{d.Owned.Facts.Proved.Since, d.Owned.Facts.Claimed.Since} {
			if !t.IsZero() && t.Before(since) {
				since = t
			}
		}
	}
	decl, err := s.declarationChanges(ctx, since, devices)
	if err != nil {
		return InventoryReport{}, err
	}
	r := InventoryReport{CheckedAt: now, BootCheckWindow: s.window}
	for _, d := range devices {
		r.Devices = append(r.Devices, s.checkInventory(d, decl[d.ID], now))
	}
	return r, nil
}

// InventoryInterval is how often `fleetd serve` checks the whole fleet's inventory for its
// metric, and InventoryFirstCheck how long after start it checks the first time: not at once,
// where it would add a device listing and two change-log reads to the start's own work (the first
// reconcile of every device, the webhooks that waited), and not an hour later, which would leave
// fleetd_inventory_differences unknown that long (docs/operate.md, "Metrics and alerts").
const (
	InventoryInterval   = time.Hour
	InventoryFirstCheck = time.Minute
)

// RunInventoryCheck checks the whole fleet first after first, then every interval until ctx ends,
// for fleetd_inventory_differences; a check that fails is counted and logged, and the gauge
// keeps the last check's counts (it has no series before this process's first check).
func (s *Review) RunInventoryCheck(ctx context.Context, first, interval time.Duration) error {
	for wait := first; ; wait = interval {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		rep, err := s.InventoryCheck(ctx, nil)
		if err != nil && ctx.Err() == nil {
			s.core.log.Warn().Err(err).Msg("inventory check failed; the next one tries again")
		} else if err == nil {
			s.core.log.Info().Int("devices", len(rep.Devices)).Bool("differs", rep.Differs()).Msg("inventory checked")
		}
		s.afterSweep()
	}
}

// observeInventory records a whole fleet's check in the metrics.
func (s *Review) observeInventory(rep InventoryReport, err error) {
	if err != nil {
		s.core.metrics.inventoryRuns.WithLabelValues("error").Inc()
		return
	}
	s.core.metrics.inventoryRuns.WithLabelValues("ok").Inc()
	for k, n := range rep.Count() {
		s.core.metrics.inventoryDiffs.WithLabelValues(string(k)).Set(float64(n))
	}
}

// inventoryDevices reads the named devices, or every fleet device, sorted by name.
func (s *Review) inventoryDevices(ctx context.Context, names []string) ([]Device, error) {
	if len(names) == 0 {
		all, err := s.core.netbox.Devices(ctx)
		if err != nil {
			return nil, fmt.Errorf("list devices: %w: %w", ErrNetBoxUnavailable, err)
		}
		out := slices.DeleteFunc(all, func(d Device) bool { return d.Declared.Class == "" })
		slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	}
	var out []Device
	for _, name := range names {
		d, err := s.core.netbox.DeviceByNameSealed(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return nil, Refuse(RefusedNotFound, "unknown_device", "NetBox has no device named %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("read device %q: %w: %w", name, ErrNetBoxUnavailable, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// checkInventory is one device's check at now, given its declaration's last change.
func (s *Review) checkInventory(d Device, decl declarationChange, now time.Time) InventoryDevice {
	out := InventoryDevice{Device: d.Name, Class: d.Declared.Class, DeclaredAt: decl.at}
	f := d.Owned.Facts
	if d.Owned.FactsUnreadable != "" {
		out.Differences = append(out.Differences, Difference{Kind: DiffFactsUnreadable, Source: "fleet_facts",
			Detail: fmt.Sprintf("fleet_facts cannot be read (%s); an accepted enrollment or boot check writes it again", d.Owned.FactsUnreadable)})
	}
	retention := s.retention
	current := func(half string, seen time.Time) bool {
		switch {
		case seen.IsZero():
			return false
		case now.Sub(seen) > retention:
			out.Stale = append(out.Stale, StaleFacts{Half: half, Seen: seen, DeclaredAt: now.Add(-retention), By: "(older than NetBox's change log keeps)"})
			return false
		case decl.at.After(seen):
			out.Stale = append(out.Stale, StaleFacts{Half: half, Seen: seen, DeclaredAt: decl.at, By: decl.by})
			return false
		}
		return true
	}
	if seen := factsSeen(d, f.Proved.Since); current("proved", seen) {
		out.Differences = append(out.Differences, provedDifferences(d, f.Proved, seen)...)
	}
	if seen := factsSeen(d, f.Claimed.Since); current("claimed", seen) {
		out.Differences = append(out.Differences, claimedDifferences(d, f.Claimed, seen)...)
	}
	out.Differences = append(out.Differences, s.recordDifferences(d, now)...)
	switch {
	case len(out.Differences) > 0:
		out.Result = InventoryDiffers
	case len(out.Stale) > 0:
		out.Result = InventoryStale
	case f.Empty():
		out.Result = InventoryNoFacts
	default:
		out.Result = InventoryAgrees
	}
	return out
}

// factsSeen is when a half of the facts was last seen: its Since, or the device's last accepted
// boot check when that came later (a boot check reports both halves, and one that finds the same
// values writes nothing to fleet_facts, only last_boot_check).
func factsSeen(d Device, since time.Time) time.Time {
	if last := d.Owned.LastBootCheck; !since.IsZero() && last.After(since) {
		return last.UTC()
	}
	return since
}

func (c Config) inventoryWindow() time.Duration {
	if c.InventoryBootCheckWindow > 0 {
		return c.InventoryBootCheckWindow
	}
	return DefaultBootCheckWindow
}

func (c Config) changeLogRetention() time.Duration {
	if c.ChangeLogRetention > 0 {
		return c.ChangeLogRetention
	}
	return DefaultChangeLogRetention
}

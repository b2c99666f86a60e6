package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Requests is the owner's requests from claim to end: the reconcile every trigger runs (a
// webhook, the periodic pass, an operator, a Workflow event), the Workflows it creates and
// follows, the pruning of ended ones, and the periodic pass's backstop against other users' writes.
type Requests struct {
	core      *core
	inst      Installer
	catalog   Catalog
	rnd       Random
	fleetdURL string        // where agents and nodes reach fleetd (Config.FleetdURL), for the Workflows
	refusals  *lastRefusals // the last enrollment refusal per device, journaled when its Workflow ends
	queued    sync.Map      // "id request action": queued requests already journaled (noteQueued)
	foreign   *foreignWrites
	// receiptRefusals keeps the refused receipts already journaled (receipt.go).
	receiptRefusals journaledReceipts
	afterSweep      func() // Config.AfterSweep, or nothing
	// spire bans a wiping or retiring device's SPIRE agents (spireban.go); nil: none configured.
	spire SPIRE
	// spireFailures keeps the "id request" of the requests whose failed ban is already journaled.
	spireFailures sync.Map
	// nodes cordons and deletes a leaving device's Node in the workload cluster (leaving.go).
	nodes *nodeCleanup
}

// maxConflicts bounds how often one decision re-reads a device that changed under it.
const maxConflicts = 5

// Reconcile re-reads one device and takes the next step its request needs, if any. A webhook, the
// periodic reconcile, a Workflow event and an operator all end here, so every trigger runs the
// same code path and a duplicate trigger finds nothing left to do.
func (s *Requests) Reconcile(ctx context.Context, id int64) (Outcome, error) {
	return s.reconcile(ctx, id, nil)
}

// reconcile is Reconcile with the Workflows as a listing made before (nil: read each one).
func (s *Requests) reconcile(ctx context.Context, id int64, listed workflowListing) (Outcome, error) {
	unlock := s.core.locks.lock(id)
	defer unlock()
	start := s.core.clock.Now()
	defer func() { s.core.metrics.reconcileSeconds.Observe(s.core.clock.Now().Sub(start).Seconds()) }()

	for attempt := 0; ; attempt++ {
		d, err := s.core.netbox.Device(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return Outcome{DeviceID: id, Step: "read", Result: "unknown-device"}, nil
		}
		if err != nil {
			return Outcome{DeviceID: id, Step: "read", Result: "error"}, fmt.Errorf("read device %d: %w: %w", id, ErrNetBoxUnavailable, err)
		}
		if d, err = s.core.vouched(ctx, d); err != nil {
			return outcomeFor(d, RequestAction(d.Owned.Request), "owned-fields", "refused"), err
		}
		out, err := s.advance(ctx, d, listed)
		if errors.Is(err, ErrConflict) && attempt < maxConflicts {
			s.core.metrics.conflicts.Inc()
			continue
		}
		return out, err
	}
}

// advance takes the next step for a device as NetBox has it now.
func (s *Requests) advance(ctx context.Context, d Device, listed workflowListing) (Outcome, error) {
	if !d.Owned.State.Terminal() {
		return s.follow(ctx, d, listed)
	}
	action := requested(d)
	if action == ActionNone {
		return outcomeFor(d, ActionNone, "idle", "nothing-to-do"), nil
	}
	if problems := problemsOf(requestChecks(s.catalog, d, action)); len(problems) > 0 {
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

// requestChecks is every check the claim makes of a request: the action itself, then the declaration
// (Device.Checks). An action that is not a request is the only check.
func requestChecks(catalog Catalog, d Device, action Action) []DeclarationCheck {
	switch {
	case !validAction(action):
		return []DeclarationCheck{{Name: "action", Problem: fmt.Sprintf("desired_action %q is not one of provision, attest, wipe", action)}}
	case action == ActionRetire && d.Status != StatusDecommissioning:
		return []DeclarationCheck{{Name: "action", Problem: "desired_action retire is not a request: set the device status to decommissioning to retire it"}}
	}
	return d.Checks(action, catalog)
}

// ReconcileAll lists every device and reconciles those that need attention, so a lost webhook
// delays a request but never loses it (docs/design.md §2). It reads NetBox's change log for the
// devices whose fields other users wrote (their webhook may have been lost), lists the devices,
// and checks those first (changelog.go), so that a written-back request is not taken again; then
// every listed device whose seal fails, or that is not sealed with the signing key yet, is read
// with its change log, repaired or sealed (trust.go), and so is every device the cluster's
// authorization webhook refuses that the listing found in good standing (nodeview.go: only the
// change log tells another instance's write from a replay). It returns the listed devices for the
// callers that derive other state from the inventory (Kea reservations, boot-check ages).
func (s *Requests) ReconcileAll(ctx context.Context) ([]Device, error) {
	var errs []error
	logged, err := s.foreign.readLoggedWrites(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	devices, err := s.core.netbox.Devices(ctx)
	if err != nil {
		s.core.metrics.reconcileRuns.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("list devices for reconcile: %w: %w", ErrNetBoxUnavailable, err)
	}
	s.core.metrics.bootChecks.observe(devices)
	s.core.metrics.observePending(devices, s.core.clock.Now())
	s.core.metrics.observeSeals(devices, s.core.keys, s.core.brake.observe(devices))
	s.core.metrics.receipts.observe(devices)
	checked, err := s.foreign.checkLoggedWrites(ctx, logged)
	if err != nil {
		errs = append(errs, err)
	}
	listed := listWorkflows(ctx, s.inst, s.core.log, devices)
	for _, d := range devices {
		if !NeedsAttention(d) && !needsSealCheck(d, s.core.keys.Signing(), checked) && !s.core.netbox.loosening(d.ID) {
			continue
		}
		out, err := s.reconcile(ctx, d.ID, listed)
		s.core.logOutcome(out, err, "reconcile")
		if err != nil {
			errs = append(errs, err)
		}
	}
	result := "ok"
	if len(errs) > 0 {
		result = "error"
	}
	s.core.metrics.reconcileRuns.WithLabelValues(result).Inc()
	s.pruneWorkflows(ctx, devices)
	return devices, errors.Join(errs...)
}

// Run reconciles every interval until ctx ends. onListing, when set, receives each listing.
func (s *Requests) Run(ctx context.Context, interval time.Duration, onListing func(context.Context, []Device)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		start := s.core.clock.Now()
		devices, err := s.ReconcileAll(ctx)
		if err != nil {
			s.core.log.Warn().Err(err).Msg("periodic reconcile incomplete; the next run retries")
		}
		if devices != nil && onListing != nil {
			onListing(ctx, devices)
		}
		s.core.metrics.passSeconds.Observe(s.core.clock.Now().Sub(start).Seconds())
		s.afterSweep()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReconcileByName re-reads the named device and takes its next step (operator route).
func (s *Requests) ReconcileByName(ctx context.Context, name string) (Outcome, error) {
	d, err := s.core.netbox.DeviceByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return Outcome{Device: name, Step: "read", Result: "unknown-device"},
			Refuse(RefusedNotFound, "unknown_device", "NetBox has no device named %q", name)
	}
	if err != nil {
		return Outcome{Device: name, Step: "read", Result: "error"}, fmt.Errorf("read device %q: %w: %w", name, ErrNetBoxUnavailable, err)
	}
	return s.Reconcile(ctx, d.ID)
}

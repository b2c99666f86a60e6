package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The fields fleetd owns survive clients that write back what they read (docs/design.md §9, "How
// fleetd tells a new request from a written-back one"): pynetbox's save() sends the whole
// custom_fields object, every key with the value it read — fleet_seal included — whenever any
// custom field changed. Such a copy is a save by another user than fleetd, so the trust check of
// every decision's read (trust.go) does not vouch for it, and the decision is made on fleetd's own
// values, put back first (repair.go).

// foreignWrites is the periodic reconcile's backstop against other users' writes of fleetd's
// fields whose webhook was lost: it reads NetBox's change log since the last pass (changelog.go)
// and checks each device another user saved. Only the periodic reconcile (Requests.ReconcileAll)
// calls it; every other read makes the same check on its own device (core.judgedOnOwnFields).
type foreignWrites struct {
	core        *core
	changes     ChangeLog     // nil: the change log is not read
	logMark     changeLogMark // where the next pass reads the change log from
	serviceUser string        // fleetd's own NetBox user (Config.ServiceUser): "" reads no change log
	retention   time.Duration // how long NetBox keeps its change log (Config.ChangeLogRetention)
}

// checkOwnedFields reads a device as a decision would and, if fleetd does not vouch for the
// values of its fields, puts back its own (or marks it untrusted), without deciding anything
// else. The periodic reconcile's backstop calls it for each device another user saved
// (changelog.go); a webhook's reconcile makes the same check before it decides.
func (s *foreignWrites) checkOwnedFields(ctx context.Context, id int64) (Outcome, error) {
	unlock := s.core.locks.lock(id)
	defer unlock()
	d, err := s.core.netbox.Device(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Outcome{DeviceID: id, Step: "owned-fields", Result: "unknown-device"}, nil
	}
	if err != nil {
		return Outcome{DeviceID: id, Step: "owned-fields", Result: "error"}, fmt.Errorf("read device %d: %w: %w", id, ErrNetBoxUnavailable, err)
	}
	d, err = s.core.judgedOnOwnFields(ctx, d)
	out := outcomeFor(d, RequestAction(d.Owned.Request), "owned-fields", string(d.Trust.Verdict))
	return out, err
}

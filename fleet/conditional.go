package fleet

import (
	"context"
	"errors"
	"fmt"
)

// Decide is one decision of a conditional write: given the device as NetBox has it now, the
// patch to write, or write=false when this device needs no write (someone else already did what
// the caller meant, or the device moved on so that the write no longer applies). Decide must
// depend only on d and on values the caller fixed before the first call: it runs again after
// every conflict, on the device as it is then. An error ends the write without writing.
type Decide func(d Device) (p Patch, write bool, err error)

// updateIfMatch is fleetd's one way to write a decision to NetBox when more than one writer may
// act on the device at once — several fleetd instances, an owner's script, NetBox's UI
// (docs/design.md §2 and §9): it writes what decide returns for d, sealed (update), conditionally
// on d.Version (If-Match), and when NetBox answers 412 it re-reads the device and calls decide
// again, at most maxConflicts times. It returns the device after the write (without its MACs, as
// NetBox.Update) or, when decide wrote nothing, the device decide last saw; and whether it
// wrote.
//
// Trust: NetBox's ETag is the only version; on NetBox without ETags (before 4.6) d.Version is
// empty and the write is last-write-wins, which is why several instances need NetBox ≥ 4.6
// (docs/operate.md, "Several instances"). The patch's IfVersion and Seal are set here; decide
// leaves them.
//
// Errors: those of NetBox.Device and NetBox.Update (ErrNotFound when the device is gone),
// ErrConflict wrapped when the device kept changing, and decide's own.
//
// Usage:
//
//	d, wrote, err := s.updateIfMatch(ctx, d, func(d Device) (Patch, bool, error) {
//		if d.Owned.Request != req { // the request moved on: nothing to record
//			return Patch{}, false, nil
//		}
//		return Patch{Message: &msg}, true, nil
//	})
func (s *core) updateIfMatch(ctx context.Context, d Device, decide Decide) (Device, bool, error) {
	return s.updateIfMatchReading(ctx, d, decide, s.netbox.Device)
}

// updateIfMatchReading is updateIfMatch that reads the device again after a conflict with reread.
func (s *core) updateIfMatchReading(ctx context.Context, d Device, decide Decide, reread func(context.Context, int64) (Device, error)) (Device, bool, error) {
	id := d.ID
	for attempt := 0; ; attempt++ {
		p, write, err := decide(d)
		if err != nil || !write {
			return d, false, err
		}
		p.IfVersion = d.Version
		got, err := s.update(ctx, d, p)
		if err == nil {
			got.MACs = d.MACs
			return got, true, nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= maxConflicts {
			return d, false, err
		}
		if d, err = reread(ctx, id); err != nil {
			return d, false, fmt.Errorf("re-read device %d after a conflicting write: %w", id, err)
		}
	}
}

// updateOnOwnFields is updateIfMatch for an event of a running request, decided on the device
// judged on fleetd's own values (judgedOnOwnFields) first and again after every conflict: a
// conflict is another save, and another user's copy that lands between the read and the write
// would otherwise be decided on as fleetd's (the two-instance chaos run, seed 317628280:
// re-read after the other instance recorded a wipe's success, a copy written back with
// fleet_state pending made this instance fail the wiped request).
func (s *core) updateOnOwnFields(ctx context.Context, d Device, decide Decide) (Device, bool, error) {
	d, err := s.judgedOnOwnFields(ctx, d)
	if err != nil {
		return d, false, err
	}
	return s.updateIfMatchReading(ctx, d, decide, func(ctx context.Context, id int64) (Device, error) {
		cur, err := s.netbox.Device(ctx, id)
		if err != nil {
			return cur, err
		}
		return s.judgedOnOwnFields(ctx, cur)
	})
}

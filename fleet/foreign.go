package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The fields fleetd owns survive clients that write back what they read (docs/design.md §9, "How
// fleetd tells a new request from a written-back one"): pynetbox's save() sends the whole
// custom_fields object, every key with the value it read, whenever any custom field changed.

// ForeignWrite is one write of a device by a NetBox user other than fleetd's own, as the webhook's
// snapshots show it: the device's fields before and after the write. Only the fields fleetd owns
// and desired_action are read from Before and After.
//
// Trust: the snapshots are NetBox's (the webhook's signature was verified); they say what the
// write changed, not what fleetd should do: the device is read again before anything is written.
type ForeignWrite struct {
	DeviceID      int64
	User          string
	Before, After Device
}

// ownedField is one field fleetd owns: its NetBox name (docs/design.md §2), whether two devices
// hold the same value in it, how a patch puts a device's value back, and how one device's value is
// copied into another's (the change log's backstop composes a write from several saves).
type ownedField struct {
	name    string
	same    func(a, b Owned) bool
	restore func(p *Patch, from Owned)
	set     func(dst *Owned, src Owned)
}

// field is the ownedField of the value at(o) holds, which a patch writes through in(p).
func field[T any](name string, at func(*Owned) *T, in func(*Patch) **T, eq func(a, b T) bool) ownedField {
	return ownedField{name: name,
		same:    func(a, b Owned) bool { return eq(*at(&a), *at(&b)) },
		restore: func(p *Patch, o Owned) { v := *at(&o); *in(p) = &v },
		set:     func(dst *Owned, src Owned) { *at(dst) = *at(&src) },
	}
}

func equal[T comparable](a, b T) bool { return a == b }

func ownedFieldTable() []ownedField {
	return []ownedField{
		field("fleet_state", func(o *Owned) *State { return &o.State }, func(p *Patch) **State { return &p.State }, equal[State]),
		field("fleet_message", func(o *Owned) *string { return &o.Message }, func(p *Patch) **string { return &p.Message }, equal[string]),
		field("fleet_request", func(o *Owned) *string { return &o.Request }, func(p *Patch) **string { return &p.Request }, equal[string]),
		field("fleet_workflow", func(o *Owned) *string { return &o.Workflow }, func(p *Patch) **string { return &p.Workflow }, equal[string]),
		field("ldevid_serial", func(o *Owned) *string { return &o.LDevIDSerial }, func(p *Patch) **string { return &p.LDevIDSerial }, equal[string]),
		field("lak_serial", func(o *Owned) *string { return &o.LAKSerial }, func(p *Patch) **string { return &p.LAKSerial }, equal[string]),
		field("ldevid_serial_previous", func(o *Owned) *string { return &o.LDevIDSerialPrevious },
			func(p *Patch) **string { return &p.LDevIDSerialPrevious }, equal[string]),
		field("lak_serial_previous", func(o *Owned) *string { return &o.LAKSerialPrevious },
			func(p *Patch) **string { return &p.LAKSerialPrevious }, equal[string]),
		field("boot_baseline", func(o *Owned) *string { return &o.BootBaseline }, func(p *Patch) **string { return &p.BootBaseline }, equal[string]),
		field("last_boot_check", func(o *Owned) *time.Time { return &o.LastBootCheck }, func(p *Patch) **time.Time { return &p.LastBootCheck },
			func(a, b time.Time) bool { return a.Equal(b) }),
		field("boot_check", func(o *Owned) *BootCheck { return &o.BootCheck }, func(p *Patch) **BootCheck { return &p.BootCheck }, equal[BootCheck]),
		field("fleet_identity", func(o *Owned) *IdentityMaterial { return &o.Identity }, func(p *Patch) **IdentityMaterial { return &p.Identity },
			identityEqual),
		factsField,
	}
}

// factsField is fleet_facts: a value fleetd cannot read decodes as no facts, so the reason it
// could not be read is compared too (an unreadable value written over none is put back to none).
var factsField = ownedField{name: "fleet_facts",
	same:    func(a, b Owned) bool { return a.Facts.Equal(b.Facts) && a.FactsUnreadable == b.FactsUnreadable },
	restore: func(p *Patch, o Owned) { f := o.Facts; p.Facts = &f },
	set:     func(dst *Owned, src Owned) { dst.Facts, dst.FactsUnreadable = src.Facts, src.FactsUnreadable },
}

// undoPatch is the write that puts back what w changed of fleetd's fields on the device as it is
// now (cur): each field the write changed and that still holds the value it wrote gets the value
// it had before (a field changed since by anyone is left alone). A desired_action the write carried
// is cleared when the write's copy was read before the device's current request was claimed (its
// fleet_request is not the one it overwrote): that desired_action is the one the request took.
func undoPatch(w ForeignWrite, cur Device) (p Patch, restored []string, staleAction bool) {
	for _, f := range ownedFieldTable() {
		if f.same(w.Before.Owned, w.After.Owned) || !f.same(cur.Owned, w.After.Owned) {
			continue
		}
		f.restore(&p, w.Before.Owned)
		restored = append(restored, f.name)
	}
	staleAction = w.After.Declared.DesiredAction != ActionNone && w.After.Owned.Request != w.Before.Owned.Request &&
		cur.Declared.DesiredAction == w.After.Declared.DesiredAction
	p.ClearDesiredAction = staleAction
	return p, restored, staleAction
}

// UndoForeignWrite puts back the fields fleetd owns that a write by another NetBox user changed,
// with a conditional write (UpdateIfMatch), journals who wrote them, and counts it
// (fleetd_owned_field_writes_total). The owner's own fields in the same write are left as they
// are; the caller then reconciles the device, which judges them against the restored state.
func (s *Service) UndoForeignWrite(ctx context.Context, w ForeignWrite) (Outcome, error) {
	unlock := s.locks.lock(w.DeviceID)
	defer unlock()
	return s.undoForeignWrite(ctx, w)
}

// undoForeignWrite is UndoForeignWrite under the device's lock, held by the caller.
func (s *Service) undoForeignWrite(ctx context.Context, w ForeignWrite) (Outcome, error) {
	out := Outcome{DeviceID: w.DeviceID, Step: "owned-fields", Result: "nothing-to-undo"}
	d, err := s.inv.Device(ctx, w.DeviceID)
	if errors.Is(err, ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read device %d: %w: %w", w.DeviceID, ErrInventory, err)
	}
	var restored []string
	var stale bool
	d, wrote, err := UpdateIfMatch(ctx, s.inv, d, func(cur Device) (Patch, bool, error) {
		var p Patch
		p, restored, stale = undoPatch(w, cur)
		return p, !p.Empty(), nil
	})
	out = outcomeFor(d, RequestAction(d.Owned.Request), "owned-fields", "nothing-to-undo")
	if err != nil {
		s.metrics.ownedWrites.WithLabelValues("error").Inc()
		return out, fmt.Errorf("restore the fields fleetd owns on %s: %w", d.Name, inventoryErr(err))
	}
	if !wrote {
		return out, nil
	}
	msg := fmt.Sprintf("Fields owned by fleetd were written by %s (%s): restored.", w.User, strings.Join(restored, ", "))
	if stale {
		msg += fmt.Sprintf(" The same write set desired_action=%s from a copy read before request %s was claimed, so it is not taken as a new request; set desired_action again if you meant one.",
			w.After.Declared.DesiredAction, d.Owned.Request)
	}
	s.metrics.ownedWrites.WithLabelValues("restored").Inc()
	s.journal(ctx, d, JournalWarning, msg)
	out.Result, out.Detail = "restored", msg
	return out, nil
}

// identityEqual compares two identities as NetBox stores them (their JSON).
func identityEqual(a, b IdentityMaterial) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// undoStandingWrite is the check a claim or a rejection makes first (advance): a copy written back
// by another user can reach NetBox while fleetd acts on a webhook of an earlier save, whose own
// snapshots show nothing of it, and the written-back fleet_state and desired_action would then be
// judged as an owner's request. So before either, the device's change log of the last hour is read
// (one NetBox request, only when a request is about to be decided) and what still stands of
// others' writes of fleetd's fields is undone. It reports whether it wrote; the caller then reads
// the device again. Without a change log or a service user it does nothing, as the backstop does.
func (s *Service) undoStandingWrite(ctx context.Context, d Device) (bool, error) {
	if s.changes == nil || s.cfg.ServiceUser == "" {
		return false, nil
	}
	history, err := s.changes.DeviceChanges(ctx, ChangeQuery{Since: s.clock.Now().Add(-changeLogLookback), DeviceID: d.ID})
	if err != nil {
		return false, fmt.Errorf("read the change log of %s before deciding its request: %w: %w", d.Name, ErrInventory, err)
	}
	w, ok := standingWrite(history, s.cfg.ServiceUser)
	if !ok {
		return false, nil
	}
	out, err := s.undoForeignWrite(ctx, w)
	s.logOutcome(out, err, "change-log")
	return out.Result == "restored", err
}

// judgedOnOwnFields is the device with what still stands of others' writes of fleetd's fields
// undone (undoStandingWrite) and read again; d itself when nothing was undone. Every step that
// records a request's event or creates its Workflow judges the device through it: a copy written
// back by an owner's client can put an older request and its running state back over a terminal
// one, and its own webhook can reach fleetd (or the other instance) after a Workflow event or a
// reconcile of the device. Judged as fleetd's, that older request would be followed again: its
// failed Workflow moved a retired device to failed (the two-instance chaos run, seed 906).
func (s *Service) judgedOnOwnFields(ctx context.Context, d Device) (Device, error) {
	undone, err := s.undoStandingWrite(ctx, d)
	if err != nil || !undone {
		return d, err
	}
	cur, err := s.inv.Device(ctx, d.ID)
	if err != nil {
		return d, fmt.Errorf("read %s again after restoring the fields fleetd owns: %w: %w", d.Name, ErrInventory, err)
	}
	return cur, nil
}

// updateOnOwnFields is UpdateIfMatch for an event of a running request, decided on the device
// judged on fleetd's own values (judgedOnOwnFields) first and again after every conflict: a
// conflict is another save, and another user's copy that lands between the change-log check and
// the write would otherwise be decided on as fleetd's (the two-instance chaos run, seed
// 317628280: re-read after the other instance recorded a wipe's success, a copy written back with
// fleet_state pending made this instance fail the wiped request). A conflict costs one change-log
// read more.
func (s *Service) updateOnOwnFields(ctx context.Context, d Device, decide Decide) (Device, bool, error) {
	d, err := s.judgedOnOwnFields(ctx, d)
	if err != nil {
		return d, false, err
	}
	return updateIfMatchReading(ctx, s.inv, d, decide, func(ctx context.Context, id int64) (Device, error) {
		cur, err := s.inv.Device(ctx, id)
		if err != nil {
			return cur, err
		}
		return s.judgedOnOwnFields(ctx, cur)
	})
}

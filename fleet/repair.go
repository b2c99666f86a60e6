package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// How fleetd writes the fields it owns, and puts them back (docs/design.md §9, "Sealed fields"):
// every write is sealed over the values the device holds after it; a device whose values fleetd
// does not vouch for is put back to fleetd's newest own write that NetBox's change log holds
// (never to a webhook's snapshot or another user's save), or, when the log holds none, marked
// untrusted with every other value cleared.

// update writes p to the device base was read as: the message capped, every field fleetd owns
// written when base's values are not trusted (so that no value fleetd does not vouch for stays
// under its seal), and sealed over the values the device holds after the write.
func (s *core) update(ctx context.Context, base Device, p Patch) (Device, error) {
	return s.netbox.Update(ctx, base.ID, s.sealed(base, p))
}

// sealed is p with its seal (and capped, completed as update says).
func (s *core) sealed(base Device, p Patch) Patch {
	if p.Message != nil {
		m := capText(*p.Message, MaxMessage)
		p.Message = &m
	}
	if !base.Trust.Trusted() {
		p = completed(p, base.Owned) // zero: the read kept none of the values
	}
	after := base.Owned
	p.ApplyOwned(&after)
	p.Seal = s.keys.Seal(base.ID, after, s.sealedAt.next(s.clock.Now()))
	return p
}

// sealTimes are the times this process seals at: the clock's, and always after the last one, so
// that every write of fleetd's changes fleet_seal and NetBox logs it (it logs no save that
// changed nothing) even when two writes leave the same values within one tick of the clock.
type sealTimes struct {
	mu   sync.Mutex
	last time.Time
}

func (t *sealTimes) next(now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !now.After(t.last) {
		now = t.last.Add(time.Nanosecond)
	}
	t.last = now
	return now
}

// ApplyOwned applies the patch's fields fleetd owns to o, as NetBox merges them (a value fleetd
// writes into fleet_facts is facts it reads).
func (p Patch) ApplyOwned(o *Owned) {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.State != nil {
		o.State = *p.State
	}
	set(&o.Message, p.Message)
	set(&o.Request, p.Request)
	set(&o.Workflow, p.Workflow)
	set(&o.LDevIDSerial, p.LDevIDSerial)
	set(&o.LAKSerial, p.LAKSerial)
	set(&o.LDevIDSerialPrevious, p.LDevIDSerialPrevious)
	set(&o.LAKSerialPrevious, p.LAKSerialPrevious)
	set(&o.BootBaseline, p.BootBaseline)
	if p.LastBootCheck != nil {
		o.LastBootCheck = *p.LastBootCheck
	}
	if p.BootCheck != nil {
		o.BootCheck = *p.BootCheck
	}
	if p.Identity != nil {
		o.Identity = *p.Identity
	}
	if p.Facts != nil {
		o.Facts, o.FactsUnreadable = *p.Facts, ""
	}
}

// completed is p writing every field fleetd owns: those p leaves alone get o's values.
func completed(p Patch, o Owned) Patch {
	fill := func(dst **string, v string) {
		if *dst == nil {
			*dst = &v
		}
	}
	if p.State == nil {
		p.State = &o.State
	}
	fill(&p.Message, o.Message)
	fill(&p.Request, o.Request)
	fill(&p.Workflow, o.Workflow)
	fill(&p.LDevIDSerial, o.LDevIDSerial)
	fill(&p.LAKSerial, o.LAKSerial)
	fill(&p.LDevIDSerialPrevious, o.LDevIDSerialPrevious)
	fill(&p.LAKSerialPrevious, o.LAKSerialPrevious)
	fill(&p.BootBaseline, o.BootBaseline)
	if p.LastBootCheck == nil {
		p.LastBootCheck = &o.LastBootCheck
	}
	if p.BootCheck == nil {
		p.BootCheck = &o.BootCheck
	}
	if p.Identity == nil {
		p.Identity = &o.Identity
	}
	if p.Facts == nil {
		p.Facts = &o.Facts
	}
	return p
}

// judgedOnOwnFields is the device a decision may be made on: d itself when fleetd vouches for
// its values; when it does not, the device after repair put fleetd's values back (or marked it
// untrusted), read again. A device sealed under a key this fleetd does not have is a refusal
// (seal_key_unknown): nothing is decided on it and nothing written. Every step that decides on
// a device judges it here first, and again after every conflicting write (updateOnOwnFields).
func (s *core) judgedOnOwnFields(ctx context.Context, d Device) (Device, error) {
	switch d.Trust.Verdict {
	case VerdictTrusted, VerdictUnsealed:
		return d, nil
	case VerdictUnknownKey:
		return d, Refuse(RefusedConflict, "seal_key_unknown", "%s: %s; add that key to every instance's netbox.seal_keys (docs/operate.md, \"Seal keys\")",
			d.Name, d.Trust.Reason)
	}
	out, err := s.repair(ctx, d)
	s.logOutcome(out, err, "owned-fields")
	if err != nil {
		return d, err
	}
	cur, err := s.netbox.Device(ctx, d.ID)
	if err != nil {
		return d, fmt.Errorf("read %s again after repairing the fields fleetd owns: %w: %w", d.Name, ErrNetBoxUnavailable, err)
	}
	if !cur.Trust.Trusted() {
		return cur, untrustedRefusal(cur)
	}
	return cur, nil
}

// untrustedRefusal is the refusal of a decision on a device whose values fleetd cannot vouch for.
func untrustedRefusal(d Device) error {
	return Refuse(RefusedConflict, "owned_fields_untrusted", "the fields fleetd owns on %s are not fleetd's (%s): nothing is decided on them",
		d.Name, d.Trust.Reason)
}

// repair puts back fleetd's newest own write of an untrusted device, or, when NetBox's change log
// holds none, marks it untrusted (unless the seal brake holds: seal checks failing across the
// fleet are a deployment problem, not a forgery). Both are conditional writes of every field
// fleetd owns, journaled and counted (fleetd_owned_field_writes_total).
func (s *core) repair(ctx context.Context, d Device) (Outcome, error) {
	out := outcomeFor(d, RequestAction(d.Trust.Read.Request), "owned-fields", "nothing-to-repair")
	var kind JournalKind
	var msg, result string
	var held *Device
	got, wrote, err := s.updateIfMatch(ctx, d, func(cur Device) (Patch, bool, error) {
		held = nil
		switch {
		case cur.Trust.Trusted() || cur.Trust.Verdict == VerdictUnknownKey:
			return Patch{}, false, nil // repaired meanwhile, or not for fleetd to repair
		case cur.Trust.Restore != nil:
			kind, msg, result = JournalWarning, restoredMessage(cur), "restored"
			p := completed(Patch{ClearDesiredAction: cur.Trust.StaleAction != ActionNone}, cur.Trust.Restore.Owned)
			return p, true, nil
		case s.brake.holds():
			held = &cur
			return Patch{}, false, nil
		}
		kind, msg, result = JournalDanger, untrustedMessage(cur), string(StateUntrusted)
		state := StateUntrusted
		return completed(Patch{State: &state, Message: &msg}, Owned{}), true, nil
	})
	if err != nil {
		s.metrics.ownedWrites.WithLabelValues("error").Inc()
		return out, fmt.Errorf("repair the fields fleetd owns on %s: %w", d.Name, netboxErr(err))
	}
	if held != nil {
		out.Result = "held-by-seal-brake"
		return out, fmt.Errorf("%w; the seal brake holds (docs/runbooks.md, \"Seal brake\"), so it is not marked untrusted", untrustedRefusal(*held))
	}
	if !wrote {
		return out, nil
	}
	s.metrics.ownedWrites.WithLabelValues(result).Inc()
	s.journal(ctx, got, kind, msg)
	out.Result, out.Detail = result, msg
	return out, nil
}

// restoredMessage is the journal entry of a restore.
func restoredMessage(d Device) string {
	t := d.Trust
	who := "did not hold fleetd's last write"
	if t.Writer != "" {
		who = fmt.Sprintf("were written by %s at %s", t.Writer, t.WrittenAt.UTC().Format(time.RFC3339))
	}
	msg := fmt.Sprintf("Fields owned by fleetd (%s) %s: restored to fleetd's write of %s.",
		strings.Join(t.Fields, ", "), who, t.Restore.At.UTC().Format(time.RFC3339))
	if t.StaleAction != ActionNone {
		msg += fmt.Sprintf(" The same saves set desired_action=%s from a copy read before request %s was claimed, so it is not taken as a new request; set desired_action again if you meant one.",
			t.StaleAction, t.Restore.Owned.Request)
	}
	return msg
}

// untrustedMessage is fleet_message and the journal entry of a device marked untrusted.
func untrustedMessage(d Device) string {
	return fmt.Sprintf("fleetd cannot vouch for the fields it owns on %s: %s, and NetBox's change log holds no write of fleetd's to put back. "+
		"Its request, certificates, identity and boot baseline are cleared and nothing is issued or accepted for it; "+
		"set desired_action=attest or provision to bring it back (docs/runbooks.md, \"Untrusted device\").", d.Name, d.Trust.Reason)
}

// reseal seals the values of a trusted device that carries no seal yet, or one under a key that
// is no longer the signing key (a rotation), with a write of the seal alone.
func (s *core) reseal(ctx context.Context, d Device) (Device, error) {
	upgrade := d.Trust.Verdict == VerdictUnsealed
	got, wrote, err := s.updateIfMatch(ctx, d, func(cur Device) (Patch, bool, error) {
		return Patch{}, needsReseal(cur, s.keys.Signing()), nil
	})
	if err != nil {
		s.metrics.ownedWrites.WithLabelValues("error").Inc()
		return d, fmt.Errorf("seal the fields fleetd owns on %s: %w", d.Name, netboxErr(err))
	}
	if !wrote {
		return got, nil
	}
	s.metrics.ownedWrites.WithLabelValues("sealed").Inc()
	if upgrade {
		s.journal(ctx, got, JournalInfo, fmt.Sprintf("fleetd sealed the values of its fields on %s: %s.", d.Name, d.Trust.Reason))
	}
	return got, nil
}

// vouched is judgedOnOwnFields for the reconcile, which also seals values that are not sealed
// with the signing key yet (an upgrade, a key rotation).
func (s *core) vouched(ctx context.Context, d Device) (Device, error) {
	d, err := s.judgedOnOwnFields(ctx, d)
	if err != nil || !needsReseal(d, s.keys.Signing()) {
		return d, err
	}
	return s.reseal(ctx, d)
}

// needsSealCheck reports a listed device whose values the periodic reconcile must read with their
// change log: a seal that does not verify, or values not sealed with the signing key yet. A
// device the change-log backstop checked in this pass is not read twice.
func needsSealCheck(d Device, signing string, checked map[int64]bool) bool {
	return !checked[d.ID] && (d.Trust.Verdict == VerdictUntrusted || needsReseal(d, signing))
}

// needsReseal reports a trusted device whose values are unsealed or sealed under another key
// than the signing one.
func needsReseal(d Device, signing string) bool {
	return d.Trust.Verdict == VerdictUnsealed || d.Trust.Verdict == VerdictTrusted && d.Trust.Seal.Result == SealValid && d.Trust.Seal.KeyID != signing
}

// sealBrake stops fleetd marking devices untrusted while the seals of a large share of the fleet
// fail to verify: a key file deployed wrong would otherwise clear every device. It holds until
// the first listing of this process has shown the share is small.
type sealBrake struct {
	mu    sync.Mutex
	known bool
	on    bool
}

// brakeShare: the brake holds when more than one in brakeShare of the devices with values or a
// seal fail their seal check, and at least brakeMin do.
const (
	brakeShare = 4
	brakeMin   = 3
)

// observe judges a listing's seals and reports whether the brake holds.
func (b *sealBrake) observe(devices []Device) bool {
	failing, sealed := 0, 0
	for _, d := range devices {
		if d.Seal == "" && ownedEmpty(d.Owned) && ownedEmpty(d.Trust.Read) {
			continue
		}
		sealed++
		if d.Trust.Verdict == VerdictUntrusted {
			failing++
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known, b.on = true, failing >= brakeMin && failing*brakeShare > sealed
	return b.on
}

func (b *sealBrake) holds() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.known || b.on
}

// repaired is the device as a decision would find it once repair ran, and one sentence saying
// what that write would be ("" when there is none): the plan shows it, writing nothing.
func repaired(d Device) (Device, string) {
	t := d.Trust
	switch {
	case t.Trusted():
		return d, ""
	case t.Verdict == VerdictUnknownKey:
		return d, fmt.Sprintf("nothing is decided on the device until its seal's key is configured: %s", t.Reason)
	case t.Restore != nil:
		d.Owned = t.Restore.Owned
		if t.StaleAction != ActionNone {
			d.Declared.DesiredAction = ActionNone
		}
		return d, fmt.Sprintf("the fields fleetd owns are not fleetd's (%s): it first puts back its own write of %s", t.Reason,
			t.Restore.At.UTC().Format(time.RFC3339))
	}
	d.Owned = Owned{State: StateUntrusted}
	return d, fmt.Sprintf("the fields fleetd owns are not fleetd's (%s) and NetBox's change log holds no write of fleetd's to put back: it first marks the device untrusted", t.Reason)
}

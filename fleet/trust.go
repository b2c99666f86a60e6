package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Which values of the fields fleetd owns fleetd may act on (docs/design.md §9, "Sealed fields").
// NetBox lets any user who may edit devices write them, through the REST API whatever the UI
// allows; fleetd vouches only for what it wrote. A device's values are trusted only when both
// hold:
//
//  1. the seal verifies (seal.go): a configured key sealed exactly these values of this device;
//  2. NetBox's change log, the one record such a user cannot write, shows that fleetd wrote them
//     last: the newest save of the device that touched fleetd's fields (changed one of them or
//     the seal) is by fleetd's own NetBox user and left exactly these values and this seal — or
//     no save within the log's retention touched them (a copy of an older seal written back is
//     itself a save, so it is always seen).
//
// A device read to decide on is read with its change log; a listing checks seals only, which a
// replay passes, so a listing never lets a node the cluster's authorization webhook refuses back
// in (nodeview.go).

// Verdict is what fleetd makes of a device's owned values.
type Verdict string

const (
	// VerdictTrusted: fleetd's sealed values (or none, with nothing to vouch for).
	VerdictTrusted Verdict = "trusted"
	// VerdictUnsealed: values without a seal that fleetd wrote last, or that no save within the
	// change log's retention touched (written before this fleetd sealed its writes): trusted, and
	// sealed at the device's next write (the periodic reconcile seals them).
	VerdictUnsealed Verdict = "unsealed"
	// VerdictUntrusted: values fleetd did not write, or cannot show it wrote: never acted on.
	VerdictUntrusted Verdict = "untrusted"
	// VerdictUnknownKey: sealed under a key id this fleetd is not configured with — a
	// deployment problem, not a forgery: nothing is decided and nothing is written.
	VerdictUnknownKey Verdict = "unknown-key"
)

// Trust is the verdict on one read of a device's owned values and what it rests on.
type Trust struct {
	Verdict Verdict
	Reason  string // one sentence: why, for the journal and the operator's view
	Logged  bool   // the change log was read (a device read), not only the seal (a listing)
	Seal    SealCheck
	// Writer and WrittenAt are the save that wrote values fleetd does not vouch for, when the
	// change log shows one; Fields the fields it (and the saves after it) changed.
	Writer    string
	WrittenAt time.Time
	Fields    []string
	// Read holds the values as NetBox has them when they are not trusted (Device.Owned is then
	// zero): for the journal and the operator's view, never to act on.
	Read Owned
	// Restore is fleetd's newest own write of the device in the change log, its seal verified:
	// the only values an untrusted device is put back to. Nil when the log holds none.
	Restore *Restored
	// StaleAction is a desired_action a save after that write carried with another request than
	// fleetd's (a copy read before a claim: the action that claim took); cleared with the restore.
	StaleAction Action
}

// Restored is one write of fleetd's that the change log holds: the values and when.
type Restored struct {
	Owned Owned
	At    time.Time
}

// Trusted reports whether the values may be acted on.
func (t Trust) Trusted() bool { return t.Verdict == VerdictTrusted || t.Verdict == VerdictUnsealed }

// ownedEmpty reports whether o holds no value at all (nothing to vouch for).
func ownedEmpty(o Owned) bool { return len(diffOwned(o, Owned{}, true)) == 0 }

// sameOwned reports whether a and b hold the same values as fleetd reads them.
func sameOwned(a, b Owned) bool { return len(diffOwned(a, b, true)) == 0 }

// changedFields are the names of the fields a and b hold differently.
func changedFields(a, b Owned) []string { return diffOwned(a, b, false) }

// diffOwned names the fields two values read from NetBox hold differently, in canonicalOwned's
// order (only the first when first is set). The JSON fields are compared last, and by their
// canonical JSON only when every other field is the same or every difference is wanted: a save's
// seal or state tells most saves apart at no cost.
func diffOwned(a, b Owned, first bool) []string {
	var out []string
	for _, f := range [...]struct {
		name string
		same bool
	}{
		{"fleet_state", a.State == b.State}, {"fleet_message", a.Message == b.Message},
		{"fleet_request", a.Request == b.Request}, {"fleet_workflow", a.Workflow == b.Workflow},
		{"ldevid_serial", a.LDevIDSerial == b.LDevIDSerial}, {"lak_serial", a.LAKSerial == b.LAKSerial},
		{"ldevid_serial_previous", a.LDevIDSerialPrevious == b.LDevIDSerialPrevious},
		{"lak_serial_previous", a.LAKSerialPrevious == b.LAKSerialPrevious},
		{"boot_baseline", a.BootBaseline == b.BootBaseline}, {"last_boot_check", a.LastBootCheck.Equal(b.LastBootCheck)},
		{"boot_check", a.BootCheck == b.BootCheck},
	} {
		if !f.same {
			if out = append(out, f.name); first {
				return out
			}
		}
	}
	if canonicalIdentity(a.Identity) != canonicalIdentity(b.Identity) {
		if out = append(out, "fleet_identity"); first {
			return out
		}
	}
	if canonicalFacts(a.Facts, a.FactsUnreadable) != canonicalFacts(b.Facts, b.FactsUnreadable) {
		out = append(out, "fleet_facts")
	}
	return out
}

// touches reports whether a save changed a field fleetd owns or the seal (a creation: set one).
func touches(ch DeviceChange) bool {
	return ch.Before.Seal != ch.After.Seal || !sameOwned(ch.Before.Owned, ch.After.Owned)
}

// judge is the verdict on device d as NetBox has it (its Owned as read) with its change log
// history, newest first (nil and logged false for a listing: the seal alone). self is fleetd's
// NetBox user.
func judge(keys *SealKeys, self string, d Device, history []DeviceChange, logged bool) Trust {
	t := Trust{Logged: logged, Seal: keys.Verify(d.ID, d.Owned, d.Seal)}
	switch t.Seal.Result {
	case SealUnknownKey:
		t.Verdict, t.Reason = VerdictUnknownKey, fmt.Sprintf("fleet_seal names key %s, which this fleetd is not configured with (netbox.seal_keys)", t.Seal.KeyID)
		return t
	case SealMalformed, SealMismatch:
		t.Verdict, t.Reason = VerdictUntrusted, "fleet_seal is not fleetd's seal of these values"
	case SealMissing:
		t.Verdict, t.Reason = VerdictUnsealed, "the values carry no seal yet"
		if ownedEmpty(d.Owned) {
			t.Verdict, t.Reason = VerdictTrusted, "fleetd holds no value on the device"
		}
	default:
		t.Verdict, t.Reason = VerdictTrusted, "sealed by fleetd"
	}
	if !logged {
		return t
	}
	last := slices.IndexFunc(history, touches)
	ours := slices.IndexFunc(history, func(ch DeviceChange) bool { return ch.User == self && touches(ch) })
	switch {
	case last < 0 && t.Verdict == VerdictUntrusted:
		t.Reason += ", and NetBox's change log holds no write of fleetd's to put back"
		return t
	case last < 0:
		t.Reason += "; no save within NetBox's change log touched them"
		return t
	case last == ours && history[last].After.Seal == d.Seal && sameOwned(history[last].After.Owned, d.Owned) && t.Verdict != VerdictUntrusted:
		if t.Verdict == VerdictTrusted {
			t.Reason = "sealed by fleetd, which wrote them last"
		} else {
			t.Reason += "; fleetd wrote them last"
		}
		return t
	}
	t.Verdict = VerdictUntrusted
	switch {
	case last != ours:
		w := history[last]
		t.Writer, t.WrittenAt = w.User, w.Time
		why := fmt.Sprintf("they were written by %s at %s, not by fleetd", w.User, w.Time.UTC().Format(time.RFC3339))
		if t.Seal.Result == SealMismatch || t.Seal.Result == SealMalformed {
			why = t.Reason + "; " + why
		}
		t.Reason = why
	case t.Seal.Result == SealValid:
		t.Reason = "they are not the values fleetd wrote last"
	}
	t.Restore, t.StaleAction = restoreFrom(keys, self, d, history, ours)
	t.Fields = foreignFields(history, self, ours)
	return t
}

// restoreFrom is fleetd's newest write in the history (at index ours, -1: none), if its seal
// verifies, and a desired_action a later save of another user carried back with another
// request than the one restored.
func restoreFrom(keys *SealKeys, self string, d Device, history []DeviceChange, ours int) (*Restored, Action) {
	if ours < 0 {
		return nil, ActionNone
	}
	w := history[ours]
	if keys.Verify(d.ID, w.After.Owned, w.After.Seal).Result != SealValid {
		return nil, ActionNone
	}
	r := &Restored{Owned: w.After.Owned, At: w.Time}
	for _, ch := range history[:ours] { // newest first: the last save that wrote a request
		if ch.User == self || ch.Before.Owned.Request == ch.After.Owned.Request {
			continue
		}
		if stale := ch.After.Declared.DesiredAction; ch.After.Owned.Request != r.Owned.Request && stale != ActionNone && d.Declared.DesiredAction == stale {
			return r, stale
		}
		break
	}
	return r, ActionNone
}

// foreignFields are the fields that the saves after fleetd's newest one (index ours; the whole
// history when -1) changed.
func foreignFields(history []DeviceChange, self string, ours int) []string {
	if ours < 0 {
		ours = len(history)
	}
	var out []string
	for _, ch := range history[:ours] {
		for _, f := range changedFields(ch.Before.Owned, ch.After.Owned) {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		if ch.Before.Seal != ch.After.Seal && !slices.Contains(out, "fleet_seal") {
			out = append(out, "fleet_seal")
		}
	}
	return out
}

// trusted sets d's Trust and keeps in d.Owned only values that may be acted on.
func trusted(d Device, t Trust) Device {
	d.Trust = t
	if !t.Trusted() {
		d.Trust.Read, d.Owned = d.Owned, Owned{}
	}
	return d
}

// trustedNetBox is NetBox as the service reads it: every device read to decide on is
// read together with its change log and judged (judge); a listing's devices are judged on their
// seals. Writes must be sealed (the service's update seals them).
type trustedNetBox struct {
	NetBox
	keys *SealKeys
	self string // fleetd's NetBox user; "" reads no change log (nobody can be told from fleetd)
	// view is each device's standing as a node (nodeview.go): every write sets it; every
	// listing replaces it but lifts no refusal (it marks the entry loosening); every judged read
	// may make it refuse, and lifts only a loosening entry's refusal.
	view *nodeView
}

func (t trustedNetBox) Device(ctx context.Context, id int64) (Device, error) {
	return t.read(ctx, id, t.NetBox.Device)
}

func (t trustedNetBox) DeviceFields(ctx context.Context, id int64) (Device, error) {
	return t.read(ctx, id, t.NetBox.DeviceFields)
}

// DeviceByName reads the device of that name as Device does.
func (t trustedNetBox) DeviceByName(ctx context.Context, name string) (Device, error) {
	id, err := t.NetBox.DeviceID(ctx, name)
	if err != nil {
		return Device{}, err
	}
	return t.Device(ctx, id)
}

// DeviceByNameSealed reads the device of that name judged on its seal alone, as a listing: for the
// inventory check, which decides nothing and compares what the listing compares.
func (t trustedNetBox) DeviceByNameSealed(ctx context.Context, name string) (Device, error) {
	id, err := t.NetBox.DeviceID(ctx, name)
	if err != nil {
		return Device{}, err
	}
	d, err := t.NetBox.Device(ctx, id)
	if err != nil {
		return Device{}, err
	}
	return trusted(d, judge(t.keys, t.self, d, nil, false)), nil
}

func (t trustedNetBox) Devices(ctx context.Context) ([]Device, error) {
	start := t.view.begin()
	ds, err := t.NetBox.Devices(ctx)
	for i := range ds {
		ds[i] = trusted(ds[i], judge(t.keys, t.self, ds[i], nil, false))
	}
	if err == nil {
		t.view.replace(ds, start)
	}
	return ds, err
}

// Update refuses an unsealed write: every write of fleetd's carries its seal (core.update).
// The answer is fleetd's own write, judged on its seal.
func (t trustedNetBox) Update(ctx context.Context, id int64, p Patch) (Device, error) {
	if p.Seal == "" {
		return Device{}, fmt.Errorf("update device %d: the write carries no seal (a fleetd bug: every write goes through core.update)", id)
	}
	d, err := t.NetBox.Update(ctx, id, p)
	if err != nil {
		return d, err
	}
	d = trusted(d, judge(t.keys, t.self, d, nil, false))
	t.view.observe(d)
	return d, nil
}

// read reads device id with read and, at once, its change log back to fleetd's newest save of
// its fields, and judges it. The change log is read again after the device when the read that
// ran beside it may have ended before the device's last save (its newest entry is older than the
// device's last_updated): a save written between the two reads is never missed.
func (t trustedNetBox) read(ctx context.Context, id int64, read func(context.Context, int64) (Device, error)) (Device, error) {
	start := t.view.begin() // before both reads: a write of this instance's after it is newer than what they find
	d, err := t.judgedRead(ctx, id, read)
	switch {
	case err == nil:
		t.view.judged(d, start)
	case errors.Is(err, ErrNotFound):
		t.view.forget(id)
	}
	return d, err
}

// loosening reports whether the view refuses device id's node while a listing found the device in
// good standing: the reconcile reads it with its change log, which alone tells a replay apart.
func (t trustedNetBox) loosening(id int64) bool { return t.view.loosening(id) }

// mayJoin reports whether a Ready Node of this name may be a joining device's (nodeView.mayJoin).
func (t trustedNetBox) mayJoin(name string) bool { return t.view.mayJoin(name) }

func (t trustedNetBox) judgedRead(ctx context.Context, id int64, read func(context.Context, int64) (Device, error)) (Device, error) {
	if t.self == "" {
		d, err := read(ctx, id)
		if err != nil {
			return d, err
		}
		return trusted(d, judge(t.keys, t.self, d, nil, false)), nil
	}
	until := func(ch DeviceChange) bool { return ch.User == t.self && touches(ch) }
	var (
		history []DeviceChange
		herr    error
		wg      sync.WaitGroup
	)
	wg.Go(func() { history, herr = t.NetBox.DeviceHistory(ctx, id, until) })
	d, err := read(ctx, id)
	wg.Wait()
	if err != nil {
		return d, err
	}
	if herr == nil && !covers(history, d) {
		history, herr = t.NetBox.DeviceHistory(ctx, id, until)
	}
	if herr != nil {
		return Device{}, fmt.Errorf("read the change log of device %d (%s) to judge the fields fleetd owns: %w", id, d.Name, herr)
	}
	return trusted(d, judge(t.keys, t.self, d, history, true)), nil
}

// covers reports whether a change log read (newest first) holds the save that left d as read:
// its newest entry is no older than d's last_updated (NetBox records the change after the save).
func covers(history []DeviceChange, d Device) bool {
	if d.LastUpdated.IsZero() {
		return true
	}
	return len(history) > 0 && !history[0].Time.Before(d.LastUpdated)
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/folly-infra/fleetd/dev/stack"
)

// A NetBox user who may edit devices and holds no secret of fleetd's (docs/security.md, "What a
// NetBox device editor can do"): a ForgedWrite step saves the device twice, back to back, through
// NetBox's REST API — first the values of the fields fleetd owns, fleet_seal with them, that one
// of fleetd's own earlier saves of the device left (NetBox's change log has them; a copy of the
// device kept from then would hold the same), then the values the device holds now. fleetd must
// never write the first save's values back as its own (check_history.go).

// forgedWrite plays a ForgedWrite step. It happened when the first save changed a field fleetd
// owns; a device whose saves by fleetd all left the values it holds now is idle.
func (r *Runner) forgedWrite(ctx context.Context, s Step) []Event {
	k := key(s.Kind, s.Arg)
	id := r.Stack.DeviceID(s.Machine)
	// The editor saves once fleetd has moved on from the machine's last step (a step returns
	// before fleetd's answer to it is in NetBox): the old values are then an older write.
	waitFor(ctx, staleWait, func() bool { _, ok := r.olderFleetdWrite(id); return ok })
	old, ok := r.olderFleetdWrite(id)
	if !ok {
		return []Event{idle(k, errors.New("every save of fleetd's of the device holds the values it has now: there was nothing older to write back"))}
	}
	now, ok := r.customFields(id)
	if !ok {
		return []Event{did(k, fmt.Errorf("chaos: device %s cannot be read", s.Machine))}
	}
	since := r.lastChange(id)
	evs := r.owner(ctx, s, map[string]any{"custom_fields": old})
	if evs[0].Outcome != Happened {
		return evs
	}
	second := r.owner(ctx, s, map[string]any{"custom_fields": ownedOf(now)})
	if second[0].Outcome != Happened {
		return second
	}
	back := r.writtenBack(id, since)
	if len(back) == 0 {
		evs[0] = idle(k, errors.New("the device held fleetd's older values already: the saves wrote nothing of fleetd's back"))
		return evs
	}
	r.say("chaos forged-write %s: fleetd's older values written back, then the current ones (%v)", s.Machine, back)
	return evs
}

// olderFleetdWrite is the fields fleetd owns as the oldest of fleetd's saves of device id that
// left other values than the device holds now — preferably one that left a certificate serial
// the device no longer has (a wiped or reprovisioned machine's identity) — as its change log
// records them.
func (r *Runner) olderFleetdWrite(id int64) (map[string]any, bool) {
	now, ok := r.customFields(id)
	if !ok {
		return nil, false
	}
	var first map[string]any
	for _, ch := range r.Stack.NetBox().Changes("dcim.device", id) {
		if ch.User != stack.ServiceUser || ch.PostChange == nil {
			continue
		}
		cf, _ := ch.PostChange["custom_fields"].(map[string]any)
		old := ownedOf(cf)
		if reflect.DeepEqual(old, ownedOf(now)) {
			continue
		}
		if lak, _ := old["lak_serial"].(string); lak != "" && lak != now["lak_serial"] {
			return old, true
		}
		if first == nil {
			first = old
		}
	}
	return first, first != nil
}

// ownedOf is the fields fleetd owns of custom_fields, every one named (null for none): a PATCH of
// them sets each.
func ownedOf(cf map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range ownedByFleetd {
		out[k] = cf[k]
	}
	return out
}

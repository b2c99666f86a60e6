package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/folly-infra/fleetd/dev/stack"
)

// An owner's client that writes back what it read (issue 18; docs/netbox.md "The fields written
// by fleetd are fleetd's"): before every step the Runner keeps each schedule machine's
// custom_fields as a GET of the device shows them, and a StaleWrite step saves the copy kept N
// steps earlier with one key changed, as pynetbox's Record.save() does: the whole custom_fields
// object, every key with the value it read (/work/shared/reference/netbox.md). The copies are
// read from the emulator's store, rendered as the REST API renders them, so that keeping them
// does not consume the NetBox faults meant for fleetd.

// copies are the custom_fields of a schedule's machines as they were before one step, by name.
type copies map[string]map[string]any

// keepCopies reads the machines' custom_fields as a client's GET would return them.
func (r *Runner) keepCopies(machines []string) copies {
	out := copies{}
	for _, name := range machines {
		raw, err := r.Stack.NetBox().DeviceJSON(r.Stack.DeviceID(name))
		if err != nil {
			continue
		}
		var d struct {
			CustomFields map[string]any `json:"custom_fields"`
		}
		if json.Unmarshal(raw, &d) == nil && d.CustomFields != nil {
			out[name] = d.CustomFields
		}
	}
	return out
}

// staleWrite saves the copy of the device read s.N steps earlier with the one change s.Arg says,
// as the owner. It happened when the save wrote back at least one field fleetd owns with a value
// fleetd had changed since (NetBox's change log of the save says which); a copy that still held
// fleetd's values wrote nothing of fleetd's, and is idle.
func (r *Runner) staleWrite(ctx context.Context, s Step) []Event {
	k := key(s.Kind, s.Arg)
	now := len(r.copies) - 1 // the copies kept before this step
	if now < 0 {
		return []Event{did(k, errors.New("chaos: no copy of the device was kept before the step"))}
	}
	read := max(now-max(s.N, 1), 0)
	cf, ok := r.copies[read][s.Machine]
	if !ok {
		return []Event{did(k, fmt.Errorf("chaos: no copy of %s was kept before step %d", s.Machine, read+1))}
	}
	cf = maps.Clone(cf)
	switch s.Arg {
	case "desired-action": // the owner asks for an attestation, or takes back what its copy asked
		if cf["desired_action"] == "attest" {
			cf["desired_action"] = nil
		} else {
			cf["desired_action"] = "attest"
		}
	case "owner-field": // the owner states the TPM version it meant all along ("" is 2.0)
		if v, _ := cf["tpm"].(string); v == "" {
			cf["tpm"] = "2.0"
		} else {
			cf["tpm"] = nil
		}
	default:
		return []Event{did(k, fmt.Errorf("chaos: unknown stale write %q", s.Arg))}
	}
	id := r.Stack.DeviceID(s.Machine)
	since := r.lastChange(id)
	evs := r.owner(ctx, s, map[string]any{"custom_fields": cf})
	if evs[0].Outcome != Happened {
		return evs
	}
	back := r.writtenBack(id, since)
	if len(back) == 0 {
		evs[0] = idle(k, fmt.Errorf("the copy read %d steps earlier held the values fleetd has now: nothing of fleetd's was written back", now-read))
		return evs
	}
	r.say("chaos stale-write %s: a copy read %d steps earlier wrote back %v", s.Machine, now-read, back)
	return evs
}

// lastChange is the sequence number of the device's last change-log record (0 when none).
func (r *Runner) lastChange(id int64) int64 {
	chs := r.Stack.NetBox().Changes("dcim.device", id)
	if len(chs) == 0 {
		return 0
	}
	return chs[len(chs)-1].Seq
}

// writtenBack is every field fleetd owns that the owner's saves after change since changed: what
// its copy wrote back over fleetd's values (an owner's PATCH retried after an answer lost may
// have saved twice).
func (r *Runner) writtenBack(id, since int64) []string {
	var out []string
	for _, ch := range r.Stack.NetBox().Changes("dcim.device", id) {
		if ch.Seq <= since || ch.User == stack.ServiceUser || ch.Action != "update" {
			continue
		}
		pre, _ := ch.PreChange["custom_fields"].(map[string]any)
		post, _ := ch.PostChange["custom_fields"].(map[string]any)
		for _, f := range ownedByFleetd {
			if !reflect.DeepEqual(pre[f], post[f]) && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// say writes one progress line.
func (r *Runner) say(format string, args ...any) {
	if r.Out != nil {
		fmt.Fprintf(r.Out, format+"\n", args...)
	}
}

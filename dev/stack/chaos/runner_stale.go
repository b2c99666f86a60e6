package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// An owner's client that writes back what it read (docs/netbox.md "The fields written
// by fleetd are fleetd's"): before every step the Runner keeps each schedule machine's
// custom_fields as a GET of the device shows them, and a StaleWrite step saves the copy kept N
// steps earlier with one key changed, as pynetbox's Record.save() does: the whole custom_fields
// object, every key with the value it read (pynetbox 7.0 core/response.py, Record._diff and
// updates). The copies are read from the emulator's store, rendered as the REST API renders
// them, so that keeping them does not consume the NetBox faults meant for fleetd.

// copies are the custom_fields of a schedule's machines as they were before one step, by name.
type copies map[string]map[string]any

// keepCopies reads the machines' custom_fields as a client's GET would return them.
func (r *Runner) keepCopies(machines []string) copies {
	out := copies{}
	for _, name := range machines {
		if cf, ok := r.customFields(r.Stack.DeviceID(name)); ok {
			out[name] = cf
		}
	}
	return out
}

// customFields is the device's custom_fields as the REST API renders them (every field of the
// schema, null when unset).
func (r *Runner) customFields(id int64) (map[string]any, bool) {
	raw, err := r.Stack.NetBox().DeviceJSON(id)
	if err != nil {
		return nil, false
	}
	var d struct {
		CustomFields map[string]any `json:"custom_fields"`
	}
	if json.Unmarshal(raw, &d) != nil || d.CustomFields == nil {
		return nil, false
	}
	return d.CustomFields, true
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
	cf, err := staleSave(cf, s.Arg)
	if err != nil {
		return []Event{did(k, err)}
	}
	id := r.Stack.DeviceID(s.Machine)
	// The owner's script saves once fleetd has moved on from its copy (it claimed the request the
	// last step asked for, recorded an attestation, a delivery): a step returns before fleetd's
	// answer to it is in NetBox. If fleetd writes nothing within staleWait, it saves anyway.
	waitFor(ctx, staleWait, func() bool { return len(r.differs(id, cf)) > 0 })
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

// staleSave is the custom_fields a client saves from its copy cf with the one change arg names:
// every key of the copy, with the value read (pynetbox's Record.save() once any custom field
// changed).
func staleSave(cf map[string]any, arg string) (map[string]any, error) {
	cf = maps.Clone(cf)
	switch arg {
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
		return nil, fmt.Errorf("chaos: unknown stale write %q", arg)
	}
	return cf, nil
}

// staleWait bounds how long a stale write waits for fleetd to change a field of its copy: two of
// the chaos stack's periodic reconciles.
const staleWait = 10 * time.Second

// differs is every field fleetd owns whose value on the device now is not the copy's.
func (r *Runner) differs(id int64, cf map[string]any) []string {
	var out []string
	now, ok := r.customFields(id)
	if !ok {
		return nil
	}
	for _, f := range ownedByFleetd {
		if !reflect.DeepEqual(now[f], cf[f]) {
			out = append(out, f)
		}
	}
	return out
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

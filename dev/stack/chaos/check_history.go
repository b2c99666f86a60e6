package chaos

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/netbox"
)

// The history of a device is its change log in NetBox (every save, by whom, before and after).
// The checker walks it with the lifecycle of docs/design.md §1–§2 restated here: fleetd's own code is not
// the judge of itself.

// claim is a request fleetd took: the save that wrote a new fleet_request.
type claim struct {
	request, workflow string
	at                time.Time
}

// history is what a device's change log says.
type history struct {
	claims     []claim
	attested   map[string]time.Time // request → when fleetd recorded its attestation
	issued     map[string]bool      // every ldevid_serial and lak_serial fleetd recorded
	renewed    map[string]bool      // the serials of them a renewal of an active node recorded (check_renewal.go)
	certified  bool                 // fleetd ever recorded a certificate serial
	progressed bool                 // a request ever got past pending (an attestation was recorded)

	decomPending bool // the owner set decommissioning and no retirement was taken since
	decomSince   time.Time
	asked        bool // the owner set desired_action and fleetd has not taken or cleared it since
	violations   []Violation

	foreignWrites int // saves by another user that changed a field fleetd owns
	restores      int // saves by fleetd that put back a value of its own another user's save changed
}

// snap is the part of a snapshot the checker reads.
type snap struct {
	status, state, request, workflow, desired, ldevid, lak string
}

func snapOf(m map[string]any) snap {
	cf, _ := m["custom_fields"].(map[string]any)
	str := func(v any) string { s, _ := v.(string); return s }
	return snap{status: str(m["status"]), state: str(cf["fleet_state"]), request: str(cf["fleet_request"]),
		workflow: str(cf["fleet_workflow"]), desired: str(cf["desired_action"]), ldevid: str(cf["ldevid_serial"]),
		lak: str(cf["lak_serial"])}
}

// history walks the device's change log once (and keeps the result).
func (e *evidence) history(d stack.OwnerDevice) *history {
	if h, ok := e.histories[d.ID]; ok {
		return h
	}
	h := &history{attested: map[string]time.Time{}, issued: map[string]bool{}, renewed: map[string]bool{}}
	standing := map[string]foreignSave{}  // a field fleetd owns → another user's save that changed it last
	written := map[string][]foreignSave{} // every value other users wrote in each field since fleetd's last save
	var view map[string]any               // the fields fleetd owns as fleetd's own saves left them
	for _, ch := range e.src.NetBox.Changes("dcim.device", d.ID) {
		preCF, _ := ch.PreChange["custom_fields"].(map[string]any)
		postCF, _ := ch.PostChange["custom_fields"].(map[string]any)
		switch {
		case ch.Action == "create":
			view = owned(postCF)
			h.asked = snapOf(ch.PostChange).desired != ""
			continue
		case ch.Action != "update":
			continue
		case view == nil:
			view = owned(preCF)
		}
		byFleetd := ch.User == e.src.ServiceUser
		if byFleetd {
			h.vouched(d, ch.Time, preCF, postCF, view, written)
		}
		foreign := len(standing) > 0
		if trackOwned(standing, written, byFleetd, ch.User, ch.Time, preCF, postCF) && !byFleetd {
			h.foreignWrites++
		}
		pre, post := snapOf(ch.PreChange), snapOf(ch.PostChange)
		if !byFleetd {
			// The owner's move to decommissioning asks for a retirement unless the device's last
			// request was one (it is retired, or its retirement failed, which desired_action=wipe
			// retries: docs/design.md §1): fleetd reads NetBox as it is now, where a retired
			// device set planned and decommissioning again is what it was before.
			last, _ := view["fleet_request"].(string)
			lastRetired := requestAction(last) == "retire"
			if pre.status != "decommissioning" && post.status == "decommissioning" && !lastRetired {
				h.decomPending, h.decomSince = true, ch.Time
			}
			h.ownerAsks(pre, post, view)
			continue
		}
		// fleetd's save is judged on fleetd's own values: a field another user wrote and this save
		// left alone still holds what fleetd wrote last (trackOwned reports the value left
		// standing), and a field this save put back to it is no move of the lifecycle.
		effPre, effPost := withOwned(ch.PreChange, view), withOwned(ch.PostChange, view)
		restore := false
		for _, k := range ownedByFleetd {
			if reflect.DeepEqual(preCF[k], postCF[k]) {
				continue
			}
			restore = restore || (!reflect.DeepEqual(preCF[k], view[k]) && reflect.DeepEqual(postCF[k], view[k]))
			view[k] = postCF[k]
			effPost["custom_fields"].(map[string]any)[k] = postCF[k]
		}
		if restore || foreign { // a save of fleetd's after another user's of its fields: a repair
			h.restores++
		}
		h.fleetdSave(d, ch.Time, snapOf(effPre), snapOf(effPost))
		if pre.desired != "" && post.desired == "" {
			h.asked = false // taken, refused, or a written-back desired_action cleared
		}
	}
	for _, k := range slices.Sorted(maps.Keys(standing)) {
		w := standing[k]
		h.bad(PartConsistent, d, w.at, "%s keeps the value %v that %s wrote, not fleetd: a field fleetd owns must keep what fleetd wrote (docs/design.md §9)", k, w.value, w.user)
	}
	e.histories[d.ID] = h
	return h
}

// foreignSave is a save by another user than fleetd of a field fleetd owns.
type foreignSave struct {
	user  string
	at    time.Time
	value any
}

// ownedByFleetd are the custom fields fleetd writes (netbox.OwnedFields without desired_action,
// which is the owner's and which fleetd only clears).
var ownedByFleetd = slices.DeleteFunc(netbox.OwnedFields(), func(f string) bool { return f == netbox.CFDesiredAction })

// trackOwned follows, field by field, who saved a field fleetd owns last: a save by another user
// that changed it stands until fleetd saves the device again — every save of fleetd's seals every
// field it owns (fleet_seal), so it vouches for each value it leaves, not only those it changes
// (vouched checks that those are fleetd's). written keeps every value other users wrote since
// fleetd's last save. It reports whether the save changed any field fleetd owns.
func trackOwned(standing map[string]foreignSave, written map[string][]foreignSave, byFleetd bool, user string, at time.Time, preCF, postCF map[string]any) bool {
	changed := false
	for _, k := range ownedByFleetd {
		if !reflect.DeepEqual(preCF[k], postCF[k]) {
			changed = true
			if !byFleetd {
				standing[k] = foreignSave{user: user, at: at, value: postCF[k]}
				written[k] = append(written[k], standing[k])
			}
		}
	}
	if byFleetd {
		clear(standing)
		clear(written)
	}
	return changed
}

// vouched checks one save of fleetd's against what other users wrote since fleetd's previous one
// (written): fleetd never writes back a value another user wrote that fleetd had not written
// itself (the forged editor write: the values of an older save of fleetd's written back, then the
// current ones — fleetd put the first save's values back as its own), and never seals over one
// it leaves standing. A value fleetd wrote last itself (view), an empty one, and the state and
// message of a device fleetd marks untrusted are fleetd's own.
func (h *history) vouched(d stack.OwnerDevice, at time.Time, preCF, postCF, view map[string]any, written map[string][]foreignSave) {
	marked := postCF["fleet_state"] == "untrusted"
	for _, k := range ownedByFleetd {
		v := postCF[k]
		if v == nil || v == "" || reflect.DeepEqual(v, view[k]) || marked && (k == "fleet_state" || k == "fleet_message") {
			continue
		}
		for _, w := range written[k] {
			if !reflect.DeepEqual(w.value, v) {
				continue
			}
			if reflect.DeepEqual(preCF[k], v) {
				h.bad(PartConsistent, d, at, "fleetd saved the device leaving %s = %.80v, which %s wrote, under its seal: fleetd vouches only for values it wrote (docs/design.md §9)", k, v, w.user)
			} else {
				h.bad(PartConsistent, d, at, "fleetd wrote %s = %.80v back, a value %s wrote and fleetd had not: fleetd restores only its own writes (docs/design.md §9)", k, v, w.user)
			}
			break
		}
	}
}

// owned is a copy of the fields fleetd owns of custom_fields.
func owned(cf map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range ownedByFleetd {
		out[k] = cf[k]
	}
	return out
}

// withOwned is a copy of a snapshot whose fields fleetd owns are those of view.
func withOwned(snapshot, view map[string]any) map[string]any {
	out := maps.Clone(snapshot)
	cf, _ := snapshot["custom_fields"].(map[string]any)
	cf = maps.Clone(cf)
	if cf == nil {
		cf = map[string]any{}
	}
	maps.Copy(cf, view)
	out["custom_fields"] = cf
	return out
}

// ownerAsks follows the owner's requests through a save by another user: a desired_action it sets
// is a new request, unless the same save wrote back another fleet_request than fleetd's (the copy
// was read before fleetd's current request was claimed, and carries the action a claim took:
// docs/design.md §9); one it clears is withdrawn.
func (h *history) ownerAsks(pre, post snap, view map[string]any) {
	current, _ := view["fleet_request"].(string)
	switch {
	case post.desired == "":
		h.asked = false
	case post.desired != pre.desired && (post.request == pre.request || post.request == current):
		h.asked = true
	}
}

func (h *history) bad(part string, d stack.OwnerDevice, at time.Time, format string, args ...any) {
	h.violations = append(h.violations, Violation{Part: part, Device: d.Name,
		What: fmt.Sprintf("%s (NetBox change at %s)", fmt.Sprintf(format, args...), at.Format(time.RFC3339Nano))})
}

// fleetdSave checks one save of fleetd's.
func (h *history) fleetdSave(d stack.OwnerDevice, at time.Time, pre, post snap) {
	action := requestAction(post.request)
	switch {
	case post.state == "untrusted" && pre.state != "untrusted":
		if post.request != "" || post.workflow != "" || post.ldevid != "" || post.lak != "" {
			h.bad(PartConsistent, d, at, "fleetd marked the device untrusted keeping request %q, Workflow %q, serials %q %q: the marking clears every other field", post.request, post.workflow, post.ldevid, post.lak)
		}
		h.checkStatus(d, at, pre, post, action) // the status is left alone
		return
	case post.request != pre.request:
		h.claimed(d, at, pre, post)
	case post.state != pre.state:
		if !allowedMove(pre.state, post.state, action) {
			h.bad(PartConsistent, d, at, "fleetd moved request %s from %q to %q, which the lifecycle does not allow for a %s", post.request, pre.state, post.state, action)
		}
		if pre.state == "pending" && post.state != "failed" && post.state != "rejected" {
			h.attested[post.request], h.progressed = at, true
		}
	}
	h.checkStatus(d, at, pre, post, action)
	h.checkIssued(d, at, pre, post)
	if post.ldevid != "" || post.lak != "" {
		h.certified = true
		h.issued[post.ldevid], h.issued[post.lak] = true, true
	}
	if (post.state == "wiped" || post.state == "retired" || post.state == "unconfirmed") && (post.ldevid != "" || post.lak != "") {
		h.bad(PartConsistent, d, at, "fleetd wrote fleet_state %s with ldevid_serial %q and lak_serial %q: both must be cleared", post.state, post.ldevid, post.lak)
	}
}

// claimed checks a save that took a new request.
func (h *history) claimed(d stack.OwnerDevice, at time.Time, pre, post snap) {
	if !terminal[pre.state] {
		h.bad(PartTerminal, d, at, "request %s (fleet_state %s) was replaced by request %s before it ended", pre.request, pre.state, post.request)
	}
	if post.state != "pending" {
		h.bad(PartConsistent, d, at, "fleetd took request %s with fleet_state %q, not pending", post.request, post.state)
	}
	if post.desired != "" {
		h.bad(PartConsistent, d, at, "fleetd took request %s and left desired_action %s set", post.request, post.desired)
	}
	if want := d.Name + "-" + post.request; post.workflow != want {
		h.bad(PartConsistent, d, at, "request %s names Workflow %q, not its deterministic name %s", post.request, post.workflow, want)
	}
	retire := requestAction(post.request) == "retire"
	switch {
	case pre.desired != "" && h.asked:
	case retire && h.decomPending:
	default:
		h.bad(PartWorkflow, d, at, "fleetd took request %s with no owner request waiting (no desired_action the owner set since the last claim, only one a copy wrote back, or none; no decommissioning since the last retirement): a second request for one owner request", post.request)
	}
	if retire {
		h.decomPending = false
	}
	h.asked = false
	h.claims = append(h.claims, claim{request: post.request, workflow: post.workflow, at: at})
}

// allowedMove is the lifecycle (docs/design.md §1, §2) for a request of action: the fleet_state moves
// fleetd may make without taking a new request.
func allowedMove(from, to, action string) bool {
	if terminal[from] && to == "rejected" {
		return true // a refused request keeps the last request's id
	}
	switch from {
	case "pending":
		return to == "failed" || (to == "installing" && action == "provision") || (to == "active" && action == "attest") ||
			(to == "wiping" && (action == "wipe" || action == "retire"))
	case "installing":
		return action == "provision" && (to == "configuring" || to == "active" || to == "failed")
	case "configuring":
		return action == "provision" && (to == "active" || to == "failed")
	case "wiping":
		// wiped (retired) on the machine's TPM's receipt, unconfirmed on the Workflow's success alone
		return to == "failed" || to == "unconfirmed" || (to == "wiped" && action == "wipe") || (to == "retired" && action == "retire")
	case "active":
		return to == "failed" && action == "provision" // a NoCloud install whose later action failed
	}
	return false
}

// checkStatus checks the device status fleetd wrote with a save (docs/design.md §2): planned → staged
// while installing → active when delivered; offline once wiped; failed when a request fails;
// decommissioning is the owner's and stays. Any other save leaves the status alone.
func (h *history) checkStatus(d stack.OwnerDevice, at time.Time, pre, post snap, action string) {
	if pre.status == "decommissioning" {
		if post.status != "decommissioning" {
			h.bad(PartConsistent, d, at, "fleetd changed the owner's status decommissioning to %s (fleet_state %s, request %s): decommissioning is set by the owner and stays",
				post.status, post.state, post.request)
		}
		return
	}
	want := pre.status
	if post.state != pre.state || post.request != pre.request {
		switch {
		case post.state == "pending" && action == "provision":
			want = "staged"
		case post.state == "active" && action == "provision":
			want = "active"
		case post.state == "wiped":
			want = "offline"
		case (post.state == "failed" || post.state == "unconfirmed") && action != "retire":
			want = "failed"
		}
	}
	if post.status != want {
		h.bad(PartConsistent, d, at, "fleetd wrote status %s with fleet_state %s for request %s, want %s", post.status, post.state, post.request, want)
	}
}

package fleet

import (
	"fmt"
	"strings"
	"sync"
)

// nodeView is what the cluster's authorization webhook decides on (nodeaccess.go): each device's
// standing as a node, by name, from fleetd's sealed fields only. It is a cache of NetBox, never a
// source of truth, and it costs NetBox nothing per request:
//
//   - every write of this instance's (each one sealed, core.update) sets the device's entry at
//     once, whichever way it goes;
//   - every listing (the reconcile's, every reconcile.interval; the inventory check's, the
//     operator's, the address index's) replaces it, judged on the seals: it sets new devices,
//     drops deleted ones and may make an entry refuse, but never lifts a refusal. A seal verifies
//     on every copy of values fleetd once wrote, so a device editor who writes back an older
//     "active, boot check ok" over a wiping device (a replay, docs/design.md §9, "Sealed fields")
//     passes a listing. Where a listing finds a refused device in good standing, the entry keeps
//     refusing, marked loosening, and the reconcile pass after that listing (the same pass, for
//     its own listing) reads the device with its change log;
//   - every device read judged with its change log (a NetBox webhook's decision, a boot check,
//     a claim, that pass's read) may make the entry refuse; it lifts a refusal only of an entry
//     marked loosening, and only when the read began after the listing that marked it.
//
// So a node moves back into good standing only on this instance's own write or on values the
// change log vouched for: a replay keeps it refused, and another instance's write lets it back in
// within a pass, at the cost of one read with its change log. Like the address index, a listing
// that began before a single observation does not undo it. It holds one small entry per NetBox
// device: bounded by the fleet, as the listing is.
type nodeView struct {
	mu     sync.Mutex
	built  bool
	seq    uint64 // counts the single observations and the starts of reads and listings
	byID   map[int64]viewEntry
	byName map[string][]int64 // lowercased device name → ids (NetBox allows a name once per site)
	gone   map[int64]uint64   // devices a read found deleted, by the seq of that read, until a listing begun after it
	listed uint64             // the start of the listing the view was last replaced with
}

// viewEntry is one device's standing.
type viewEntry struct {
	name    string // as NetBox has it
	key     string // lowercased: Kubernetes node names are lowercase
	refusal NodeRefusal
	// seen is the seq of what set the entry: a single observation, the start of the judged read
	// that lifted a refusal, or the start of the listing that found the device (that put its
	// refusal in doubt, when loosening). A listing that began before it leaves the entry as it is.
	seen uint64
	// loosening: a listing found the device in good standing while refusal holds. Only a judged
	// read that began after seen, or this instance's own write, lifts the refusal.
	loosening bool
	// state is fleet_state as what set the entry, or a judged read since, found it: only whether
	// a Ready Node may be a joining device's depends on it (mayJoin), never a node's standing.
	state State
}

// NodeRefusal is why a node of a device may not act in the cluster; the zero NodeRefusal is good standing.
type NodeRefusal struct {
	Code   string // a fixed code (NodeRefusedUntrusted, ...), for the metrics and the log
	Reason string // one sentence for the API server's answer and the log
}

// The codes of NodeRefusal, from its device's sealed fields.
const (
	NodeRefusedUntrusted   = "untrusted-fields"  // the seal does not verify: fleetd vouches for none of its values
	NodeRefusedLeaving     = "wipe-or-retire"    // a wipe or retirement was claimed: the machine is leaving
	NodeRefusedState       = "state"             // wiped, retired, untrusted or unconfirmed
	NodeRefusedBootFailed  = "boot-check-failed" // the last boot check failed (not drift, not missing)
	NodeRefusedRenamed     = "renamed"           // the device's name is not the one it was attested under
	NodeRefusedUnknownNode = "unknown-node"      // no device has the node's name (nodeaccess.go)
)

func newNodeView() *nodeView {
	return &nodeView{byID: map[int64]viewEntry{}, byName: map[string][]int64{}, gone: map[int64]uint64{}}
}

// refusalOf is device d's standing as a node, from its judged values (Trust, Owned) only: never
// the owner's status or request alone, which any NetBox editor writes.
func refusalOf(d Device) NodeRefusal {
	if !d.Trust.Trusted() {
		return NodeRefusal{NodeRefusedUntrusted, fmt.Sprintf("fleetd does not vouch for the fields it owns on device %s (%s): %s",
			d.Name, d.Trust.Verdict, d.Trust.Reason)}
	}
	o := d.Owned
	if a := RequestAction(o.Request); a == ActionWipe || a == ActionRetire {
		return NodeRefusal{NodeRefusedLeaving, fmt.Sprintf("device %s is on %s request %s (fleet_state %s): its node leaves the cluster",
			d.Name, a, o.Request, stateName(o.State))}
	}
	switch o.State {
	case StateWiping, StateWiped, StateRetired, StateUntrusted, StateUnconfirmed:
		return NodeRefusal{NodeRefusedState, fmt.Sprintf("device %s is %s", d.Name, o.State)}
	}
	if o.BootCheck == BootCheckFailed {
		return NodeRefusal{NodeRefusedBootFailed, fmt.Sprintf("device %s failed its last boot check", d.Name)}
	}
	if attested, renamed := AttestedAs(d); renamed {
		return NodeRefusal{NodeRefusedRenamed, renamedSentence(d, attested)}
	}
	return NodeRefusal{}
}

// renamedSentence says why device d, attested as attested, is no node of its name.
func renamedSentence(d Device, attested string) string {
	return fmt.Sprintf("device %s was attested as %s and renamed since: its certificates and its node carry the name %s, so it is no node of either name until it is provisioned again",
		d.Name, attested, attested)
}

func stateName(s State) string {
	if s == StateNone {
		return "none"
	}
	return string(s)
}

// observe records one device as this instance wrote it: its standing either way.
func (v *nodeView) observe(d Device) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	v.set(d.ID, d.Name, refusalOf(d), v.seq, false, d.Owned.State)
}

// judged records one device as a read judged with its change log found it, the read begun at
// start (begin). A refusal is set at once. Good standing lifts a refusal only of an entry marked
// loosening, only when the read began after the listing that marked it (so after what set the
// refusal: a read begun before this instance's write of a wipe's claim found the device active,
// and must not undo that write), and only when the change log was read (Trust.Logged: a replay
// passes the seal alone).
func (v *nodeView) judged(d Device, start uint64) {
	r := refusalOf(d)
	v.mu.Lock()
	defer v.mu.Unlock()
	if r.Code != "" {
		v.seq++
		v.set(d.ID, d.Name, r, v.seq, false, d.Owned.State)
		return
	}
	e, ok := v.byID[d.ID]
	if !ok || !e.loosening || start <= e.seen || !d.Trust.Logged {
		if ok && start > e.seen && e.name == d.Name {
			e.state = d.Owned.State // the refusal stays; the state is newer than what set it
			v.byID[d.ID] = e
		}
		return
	}
	v.set(d.ID, d.Name, r, start, false, d.Owned.State)
}

// loosening reports whether device id's entry refuses while a listing found it in good standing:
// the reconcile reads it with its change log.
func (v *nodeView) loosening(id int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.byID[id].loosening
}

// set puts device id's entry. The caller holds mu.
func (v *nodeView) set(id int64, name string, r NodeRefusal, seen uint64, loosening bool, state State) {
	v.unset(id)
	e := viewEntry{name: name, key: strings.ToLower(name), refusal: r, seen: seen, loosening: loosening, state: state}
	v.byID[id] = e
	if e.key != "" {
		v.byName[e.key] = append(v.byName[e.key], id)
	}
}

// unset removes device id's entry. The caller holds mu.
func (v *nodeView) unset(id int64) {
	old, ok := v.byID[id]
	if !ok {
		return
	}
	ids := v.byName[old.key]
	for i, x := range ids {
		if x == id {
			ids = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(v.byName, old.key)
	} else {
		v.byName[old.key] = ids
	}
	delete(v.byID, id)
}

// forget records that device id is no longer in NetBox: a node of its name is unknown now.
func (v *nodeView) forget(id int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	v.unset(id)
	v.gone[id] = v.seq
}

// begin marks the start of a listing or a judged read; replace or judged applies its result.
func (v *nodeView) begin() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	return v.seq
}

// replace makes the view the listing's devices (judged on their seals), except those observed
// on their own, or found deleted, since the listing began; a listing that began before the one
// already applied changes nothing. A device the view refuses and the listing finds in good
// standing keeps its refusal, marked loosening (the seal alone cannot tell a replay).
func (v *nodeView) replace(devices []Device, start uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.built && start < v.listed {
		return // a listing that began before the one applied (the reconcile's and the inventory check's overlap): older
	}
	v.listed = start
	prev, keep := v.byID, map[int64]viewEntry{}
	for id, e := range prev {
		if e.seen > start {
			keep[id] = e
		}
	}
	v.byID, v.byName = map[int64]viewEntry{}, map[string][]int64{}
	for _, d := range devices {
		_, newer := keep[d.ID]
		if deleted, ok := v.gone[d.ID]; newer || ok && deleted > start {
			continue
		}
		r := refusalOf(d)
		if old := prev[d.ID]; r.Code == "" && old.refusal.Code != "" {
			v.set(d.ID, d.Name, old.refusal, start, true, d.Owned.State)
			continue
		}
		v.set(d.ID, d.Name, r, start, false, d.Owned.State)
	}
	for id, deleted := range v.gone {
		if deleted <= start {
			delete(v.gone, id)
		}
	}
	for id, e := range keep {
		v.set(id, e.name, e.refusal, e.seen, e.loosening, e.state)
	}
	v.built = true
}

// lookup is the standing of the node named name: the devices of that name (several only when
// NetBox has one per site), the first refusal among them, and whether a listing ever filled the
// view.
func (v *nodeView) lookup(name string) (devices []string, r NodeRefusal, built bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range v.byName[strings.ToLower(name)] {
		e := v.byID[id]
		devices = append(devices, e.name)
		if r.Code == "" {
			r = e.refusal
		}
	}
	return devices, r, v.built
}

// mayJoin reports whether a Ready Node of this name may be a joining device's, so that the Node
// watch reads the device (joins.go): false only when a listing filled the view and every device
// of that name is in another state than joining, as the last listing, judged read or write of
// this instance's found it. Every kubelet's status updates and every resync of the watch would
// otherwise cost a device read each: at 10,000 nodes, tens of NetBox requests a second
// (docs/performance.md). A device another instance made joining since this instance's last
// listing is that instance's to see Ready (its own write set its view), or this one's at the
// resync after its next listing.
func (v *nodeView) mayJoin(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	ids := v.byName[strings.ToLower(name)]
	if !v.built || len(ids) == 0 {
		return true
	}
	for _, id := range ids {
		if v.byID[id].state == StateJoining {
			return true
		}
	}
	return false
}

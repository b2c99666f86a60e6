package netboxemu

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// /api/core/object-changes/: ObjectChangeViewSet, read-only, newest first (Meta.ordering
// -time), with ObjectChangeFilterSet and ObjectChangeSerializer (NB@v4.6.8:netbox/core/
// filtersets.py, core/api/serializers_/change_logging.py).

func (e *Emulator) changeResource() *resource {
	ch := e.change
	users := func() map[int]*user { return e.db.users }
	filters := []filterDef{
		numberF("id", func(id int) any { return id }),
		refKey("user", func(name string) bool { return e.db.userByName(name) != nil }, func(id int) any {
			if u, ok := e.db.users[ch(id).user]; ok {
				return u.username
			}
			return nil
		}),
		refID("user_id", idExists(users), func(id int) int { return ch(id).user }),
		charF("user_name", func(id int) any { return ch(id).userName }),
		{name: "request_id", kind: fMethod, match: func(id int, vs []string) bool { return vs[len(vs)-1] == ch(id).requestID }},
		{name: "action", kind: fChoice, single: true, noNull: true, value: func(id int) any { return ch(id).action },
			choices: func() []string { return keys(changeActionLabels) }},
		typeF("changed_object_type", func(id int) any { return ch(id).objectType }),
		{name: "changed_object_id", kind: fNumber, single: true, value: func(id int) any { return ch(id).objectID }},
		typeF("related_object_type", func(id int) any { return nullText(ch(id).relatedType) }),
		{name: "related_object_id", kind: fNumber, single: true, value: func(id int) any { return nullableID(ch(id).relatedID) }},
		charF("object_repr", func(id int) any { return ch(id).repr }),
		{name: "time", kind: fRange, value: func(id int) any { return ch(id).time }},
	}
	return &resource{
		path: "core/object-changes", objectType: "core.objectchange", verbose: "Object Change", model: "ObjectChange",
		readOnly: true,
		rows: func(keep func(int) bool) []int {
			var out []int
			for i := len(e.changes) - 1; i >= 0; i-- { // -time: the newest first
				if id := int(e.changes[i].seq); keep == nil || keep(id) {
					out = append(out, id)
				}
			}
			return out
		},
		// One object's changes (changed_object_id, exactly one value: fleetd reads a device's
		// history before each decision) come from the index, newest first as rows gives them.
		narrow: func(q url.Values) ([]int, bool) {
			vs := q["changed_object_id"]
			if len(vs) != 1 {
				return nil, false
			}
			obj, err := strconv.Atoi(vs[0])
			if err != nil {
				return nil, false
			}
			at := e.changesOf[obj]
			out := make([]int, 0, len(at))
			for i := len(at) - 1; i >= 0; i-- {
				out = append(out, int(e.changes[at[i]].seq))
			}
			return out, true
		},
		has:     func(id int) bool { return e.change(id) != nil },
		render:  func(c rc, id int) obj { return e.renderChange(c, ch(id)) },
		filters: filters,
		search: func(id int, q string) bool {
			return anyContainsFold(q, ch(id).userName, ch(id).repr, ch(id).message)
		},
		ordering: map[string]func(int) any{
			"id":                func(id int) any { return id },
			"time":              func(id int) any { return ch(id).time },
			"user_name":         func(id int) any { return ch(id).userName },
			"changed_object_id": func(id int) any { return ch(id).objectID },
		},
		meta: changeMeta,
	}
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// contentTypeNames are ContentType.__str__ (app verbose name | model verbose name) of the
// models the emulator serves.
var contentTypeNames = map[string]string{"dcim.device": "DCIM | device", "dcim.interface": "DCIM | interface",
	"dcim.macaddress": "DCIM | MAC address", "ipam.ipaddress": "IPAM | IP address",
	"extras.journalentry": "Extras | journal entry", "extras.customfield": "Extras | custom field",
	"extras.customfieldchoiceset": "Extras | custom field choice set", "extras.webhook": "Extras | webhook",
	"extras.eventrule": "Extras | event rule"}

// renderChange is ObjectChangeSerializer. The pre- and post-change data are the snapshots
// without created, last_updated and private keys ({} for none: get_clean_data); the changed
// object is nested brief, null once it is gone.
func (e *Emulator) renderChange(c rc, ch *objectChange) obj {
	path := fmt.Sprintf("core/object-changes/%d/", ch.seq)
	var u, changed any
	if usr, ok := e.db.users[ch.user]; ok {
		p := fmt.Sprintf("users/users/%d/", usr.id)
		u = obj{{"id", usr.id}, {"url", c.api(p)}, {"display", usr.username}, {"username", usr.username}}
	}
	if res, ok := e.resources[ch.objectType]; ok && res.has(ch.objectID) {
		changed = keepFields(res.render(c, ch.objectID), res.brief)
	}
	display := fmt.Sprintf("%s %s %s by %s", contentTypeNames[ch.objectType], ch.repr,
		strings.ToLower(changeActionLabels[ch.action]), ch.userName)
	return obj{{"id", ch.seq}, {"url", c.api(path)}, {"display_url", c.ui(fmt.Sprintf("core/changelog/%d/", ch.seq))},
		{"display", display}, {"time", restTime(ch.time)}, {"user", u}, {"user_name", ch.userName},
		{"request_id", ch.requestID}, {"action", choice(ch.action, changeActionLabels[ch.action])},
		{"changed_object_type", ch.objectType}, {"changed_object_id", ch.objectID}, {"changed_object", changed},
		{"object_repr", ch.repr}, {"message", ch.message},
		{"prechange_data", cleanChangeData(ch.prechange)}, {"postchange_data", cleanChangeData(ch.postchange)}}
}

// cleanChangeData is ObjectChange.get_clean_data: drop the change-tracking and private keys.
func cleanChangeData(snap any) obj {
	o, _ := snap.(obj)
	out := obj{}
	for _, f := range o {
		if f.K != "created" && f.K != "last_updated" && !strings.HasPrefix(f.K, "_") {
			out = append(out, f)
		}
	}
	return out
}

// keepFields trims a rendered object to the named fields (a nested brief representation).
func keepFields(o obj, names []string) obj {
	out := obj{}
	for _, f := range o {
		for _, n := range names {
			if f.K == n {
				out = append(out, f)
			}
		}
	}
	return out
}

package netboxemu

import (
	"bytes"
	"encoding/json"
	"time"
)

// The change log: every save of an object through the API is recorded, as NetBox's change logging
// records an ObjectChange (NB@v4.6.8:netbox/core/models/change_logging.py): when, by which user,
// the action, and the object's snapshot before and after. Unlike NetBox's events, changes are not
// coalesced per request. The emulator keeps them in memory for inspection (Changes); it serves no
// /api/core/object-changes/ endpoint. A reliability test reads the history of fleetd's custom
// fields from it: what a device went through, not only where it ended.

// ObjectChange is one recorded save.
type ObjectChange struct {
	Seq        int64 // order of the saves, from 1
	Time       time.Time
	User       string // the token's user
	ObjectType string // e.g. dcim.device
	ObjectID   int64
	Action     string         // create, update or delete
	PreChange  map[string]any // the snapshot before the save; nil on create
	PostChange map[string]any // the snapshot after the save; nil on delete
}

type objectChange struct {
	seq                   int64
	time                  time.Time
	user                  string
	objectType            string
	objectID              int
	action                string
	prechange, postchange any // snapshots (obj) as the events carry them
}

// changeActions maps event types to ObjectChange actions (core/choices.py ObjectChangeActionChoices).
var changeActions = map[string]string{"object_created": "create", "object_updated": "update",
	"object_deleted": "delete"}

// logChange records one save of the current request. As NetBox's handle_changed_object (core/
// signals.py, ObjectChange.has_changes), a save whose snapshots before and after are equal is
// not recorded; its event is still sent.
func (c *reqCtx) logChange(objectType string, id int, eventType string, pre, post any) {
	if pre != nil && post != nil {
		a, errA := json.Marshal(pre)
		b, errB := json.Marshal(post)
		if errA == nil && errB == nil && bytes.Equal(a, b) {
			return
		}
	}
	user := ""
	if c.user != nil {
		user = c.user.username
	}
	e := c.e
	e.changeSeq++
	e.changes = append(e.changes, &objectChange{seq: e.changeSeq, time: c.now(), user: user,
		objectType: objectType, objectID: id, action: changeActions[eventType], prechange: pre, postchange: post})
}

// Changes returns the recorded saves of one object, oldest first.
func (e *Emulator) Changes(objectType string, id int64) []ObjectChange {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ObjectChange
	for _, ch := range e.changes {
		if ch.objectType != objectType || ch.objectID != int(id) {
			continue
		}
		out = append(out, ObjectChange{Seq: ch.seq, Time: ch.time, User: ch.user, ObjectType: ch.objectType,
			ObjectID: id, Action: ch.action, PreChange: snapshotMap(ch.prechange), PostChange: snapshotMap(ch.postchange)})
	}
	return out
}

// snapshotMap turns a snapshot into decoded JSON (nil stays nil).
func snapshotMap(snap any) map[string]any {
	if snap == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(encodeREST(snap), &m); err != nil {
		return map[string]any{"error": "snapshot not decodable: " + err.Error()}
	}
	return m
}

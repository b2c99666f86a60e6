package netboxemu

import (
	"bytes"
	"encoding/json"
	"time"
)

// The change log: every save of an object through the API is recorded as NetBox's change logging
// records an ObjectChange (NB@v4.6.8:netbox/core/models/change_logging.py, core/signals.py):
// when, by which user, in which request, the action, the object's representation, the write's
// changelog_message, and its snapshots before and after. Unlike events, changes are not
// coalesced per request. It is served at /api/core/object-changes/ (res_changes.go) and read
// directly with Changes; the reliability tests (dev/stack/chaos) read fleetd's fields' history
// from it. Seeding (AddDevice, LoadSchema) records nothing, as a NetBox shell without a request.

// ObjectChange is one recorded save.
type ObjectChange struct {
	Seq        int64 // the record's id, in the order of the saves, from 1
	Time       time.Time
	User       string // the token's user
	RequestID  string
	ObjectType string // e.g. dcim.device
	ObjectID   int64
	Action     string         // create, update or delete
	Message    string         // the write's changelog_message
	PreChange  map[string]any // the snapshot before the save; nil on create
	PostChange map[string]any // the snapshot after the save; nil on delete
}

type objectChange struct {
	seq                   int64
	time                  time.Time
	user                  int // the user's id
	userName              string
	requestID             string
	objectType            string
	objectID              int
	relatedType           string // the related object (an interface's device), "" for none
	relatedID             int
	repr                  string // str(obj) at the time of the change
	action                string
	message               string
	prechange, postchange any // snapshots (obj) as the events carry them
}

// changeActions maps event types to ObjectChange actions (core/choices.py ObjectChangeActionChoices).
var changeActions = map[string]string{"object_created": "create", "object_updated": "update",
	"object_deleted": "delete"}

var changeActionLabels = map[string]string{"create": "Created", "update": "Updated", "delete": "Deleted"}

// requestID is the request's id (Django's request.id), drawn when first needed: the change
// records and the webhooks of one request share it.
func (c *reqCtx) requestID() string {
	if c.reqID == "" {
		c.reqID = newUUID(c.e.cfg.Rand)
	}
	return c.reqID
}

// logChange records one save of the current request. As NetBox's handle_changed_object
// (ObjectChange.has_changes), a save whose snapshots before and after are equal is not
// recorded; its event is still sent.
func (c *reqCtx) logChange(objectType string, id int, eventType string, pre, post any) {
	if pre != nil && post != nil {
		a, errA := json.Marshal(pre)
		b, errB := json.Marshal(post)
		if errA == nil && errB == nil && bytes.Equal(a, b) {
			return
		}
	}
	e := c.e
	// NetBox records the change after the save (a post_save handler), so its time is never
	// before the last_updated the save gave the object.
	at := c.now()
	if at.Before(c.touched) {
		at = c.touched
	}
	ch := &objectChange{time: at, requestID: c.requestID(), objectType: objectType, objectID: id,
		action: changeActions[eventType], message: c.message, prechange: pre, postchange: post}
	if c.user != nil {
		ch.user, ch.userName = c.user.id, c.user.username
	}
	if res, ok := e.resources[objectType]; ok {
		ch.repr = res.repr(id)
		if res.related != nil {
			ch.relatedType, ch.relatedID = res.related(id)
		}
	}
	e.changeSeq++
	ch.seq = e.changeSeq
	e.changes = append(e.changes, ch)
	e.changesOf[id] = append(e.changesOf[id], len(e.changes)-1)
}

// truncateChanges drops the change records after the first n (a rolled-back request's) and
// rebuilds the index of each object's changes from what is left.
func (e *Emulator) truncateChanges(n int) {
	e.changes = e.changes[:n]
	e.changesOf = make(map[int][]int, len(e.changesOf))
	for i, ch := range e.changes {
		e.changesOf[ch.objectID] = append(e.changesOf[ch.objectID], i)
	}
}

// PruneChangelog deletes every change record older than retention, as NetBox's daily housekeeping
// job does with CHANGELOG_RETENTION (NB@v4.6.8:netbox/core/jobs.py SystemHousekeepingJob
// .prune_changelog: ObjectChange.objects.filter(time__lt=now - retention).delete(); a retention of
// 0 keeps every record). It returns how many it deleted. The records left keep their ids.
func (e *Emulator) PruneChangelog(retention time.Duration) int {
	if retention <= 0 {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cutoff := e.cfg.Clock().UTC().Add(-retention)
	n := 0
	for n < len(e.changes) && e.changes[n].time.Before(cutoff) {
		n++
	}
	if n == 0 {
		return 0
	}
	e.pruned = e.changes[n-1].seq
	e.changes = append([]*objectChange(nil), e.changes[n:]...)
	e.truncateChanges(len(e.changes))
	return n
}

// change is the record of sequence number seq, nil when pruned or not (yet) recorded.
func (e *Emulator) change(seq int) *objectChange {
	i := int64(seq) - e.pruned - 1
	if i < 0 || i >= int64(len(e.changes)) {
		return nil
	}
	return e.changes[i]
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
		out = append(out, ObjectChange{Seq: ch.seq, Time: ch.time, User: ch.userName, RequestID: ch.requestID,
			ObjectType: ch.objectType, ObjectID: id, Action: ch.action, Message: ch.message,
			PreChange: snapshotMap(ch.prechange), PostChange: snapshotMap(ch.postchange)})
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

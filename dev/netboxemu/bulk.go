package netboxemu

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
)

// Bulk writes on a list endpoint, atomic as NetBox's are (NB@v4.6.8:netbox/netbox/api/viewsets/
// mixins.py BulkUpdateModelMixin, BulkDestroyModelMixin; NetBoxModelViewSet.create with a list):
// each object is saved in turn inside one transaction, and the first refusal rolls every one of
// them back and is the answer. Objects named by an id that does not exist are skipped, as the
// queryset filter pk__in skips them; they are handled in the model's ordering, not the body's.
//
// A rolled-back request leaves nothing behind in the emulator: no row, no change record, no event.
// (NetBox 4.6.8 rolls back rows and change records; whether events queued before the refusal
// are still flushed is not verified, see README.md.)

// atomically runs fn and, when it reports failure, restores the database, the change log and
// the request's events to what they were before.
func (c *reqCtx) atomically(fn func() bool) bool {
	e := c.e
	saved, changes, seq, events := e.db.clone(), len(e.changes), e.changeSeq, len(c.events)
	if fn() {
		return true
	}
	e.db, e.changeSeq, c.events = saved, seq, c.events[:events]
	e.truncateChanges(changes)
	return false
}

// bulkItems is BulkOperationSerializer(many=True): a list of objects, each with an integer id.
func (c *reqCtx) bulkItems() ([]obj, []int, bool) {
	v, ok := c.anyBody()
	if !ok {
		return nil, nil, false
	}
	list, isList := v.([]any)
	if !isList {
		c.invalid(obj{{"non_field_errors", []any{`Expected a list of items but got type "` + pyTypeName(v) + `".`}}})
		return nil, nil, false
	}
	items, ids, errs, bad := make([]obj, len(list)), make([]int, len(list)), make([]any, len(list)), false
	for i, item := range list {
		errs[i] = obj{}
		o, isObj := item.(map[string]any)
		if !isObj {
			errs[i], bad = obj{{"non_field_errors", []any{"Invalid data. Expected a dictionary, but got " + pyTypeName(item) + "."}}}, true
			continue
		}
		items[i] = c.objectOf(o)
		n, isNum := o["id"].(json.Number)
		id, err := strconv.Atoi(string(n))
		switch {
		case o["id"] == nil:
			errs[i], bad = obj{{"id", []any{"This field is required."}}}, true
		case !isNum || err != nil:
			errs[i], bad = obj{{"id", []any{"A valid integer is required."}}}, true
		}
		ids[i] = id
	}
	if bad {
		c.write(http.StatusBadRequest, errs)
		return nil, nil, false
	}
	return items, ids, true
}

// inOrder pairs the existing ids of a bulk request with their items, in the model's ordering.
func inOrder(res *resource, items []obj, ids []int) ([]int, map[int]obj) {
	byID := map[int]obj{}
	for i, id := range ids {
		byID[id] = items[i]
	}
	return res.rows(func(id int) bool { _, ok := byID[id]; return ok }), byID
}

// bulkUpdate is PUT or PATCH with a list on the list endpoint: 200 with the updated objects.
func (c *reqCtx) bulkUpdate(res *resource, partial bool) {
	items, ids, ok := c.bulkItems()
	if !ok {
		return
	}
	todo, byID := inOrder(res, items, ids)
	done := c.atomically(func() bool {
		for _, id := range todo {
			body := slices.DeleteFunc(slices.Clone(byID[id]), func(f field) bool { return f.K == "id" })
			c.message = changelogMessage(body)
			if !res.update(c, id, body, partial) {
				return false
			}
		}
		return true
	})
	if done {
		after, _ := inOrder(res, make([]obj, len(todo)), todo) // the ordering may have moved
		c.writeList(http.StatusOK, res, after)
	}
}

// bulkDestroy is DELETE with a list of {"id": n} on the list endpoint: 204.
func (c *reqCtx) bulkDestroy(res *resource) {
	items, ids, ok := c.bulkItems()
	if !ok {
		return
	}
	todo, byID := inOrder(res, items, ids)
	done := c.atomically(func() bool {
		for _, id := range todo {
			if !res.has(id) { // already gone with an earlier one (a cascade)
				continue
			}
			c.message = changelogMessage(byID[id])
			if !res.remove(c, id) {
				return false
			}
		}
		return true
	})
	if done {
		c.write(http.StatusNoContent, nil)
	}
}

// bulkCreate is POST with a list: every item is validated (the answer lists each item's errors,
// {} for the valid ones), and only when all are valid are all created; 201 with them by id.
func (c *reqCtx) bulkCreate(res *resource, list []any) {
	var created []int
	errs, bad, failed := make([]any, len(list)), false, false
	c.atomically(func() bool {
		for i, item := range list {
			errs[i] = obj{}
			m, isObj := item.(map[string]any)
			if !isObj {
				errs[i], bad = obj{{"non_field_errors", []any{"Invalid data. Expected a dictionary, but got " + pyTypeName(item) + "."}}}, true
				continue
			}
			body := c.objectOf(m)
			c.message = changelogMessage(body)
			id, ok := res.create(c, body)
			switch {
			case ok:
				created = append(created, id)
			case c.status == http.StatusInternalServerError: // an exception: it is the answer
				failed = true
				return false
			default:
				errs[i], bad = c.value, true
			}
		}
		return !bad
	})
	switch {
	case failed:
		return
	case bad:
		c.write(http.StatusBadRequest, errs)
		return
	}
	slices.Sort(created)
	c.writeList(http.StatusCreated, res, created)
}

func (c *reqCtx) writeList(status int, res *resource, ids []int) {
	out := []any{}
	for _, id := range ids {
		out = append(out, c.output(res, res.render(c.rc, id)))
	}
	c.write(status, out)
}

// clone copies every table (rows by value) for a bulk write to roll back to. Rows' maps and
// slices are replaced on a save, never changed in place, so sharing them is safe.
func (d *db) clone() *db {
	return &db{seq: cloneMap(d.seq), users: cloneRows(d.users), tokens: cloneRows(d.tokens),
		sites: cloneRows(d.sites), roles: cloneRows(d.roles), mfrs: cloneRows(d.mfrs),
		deviceTypes: cloneRows(d.deviceTypes), devices: cloneRows(d.devices), ifaces: cloneRows(d.ifaces),
		macs: cloneRows(d.macs), ips: cloneRows(d.ips), journal: cloneRows(d.journal),
		choiceSets: cloneRows(d.choiceSets), customFields: cloneRows(d.customFields),
		webhooks: cloneRows(d.webhooks), eventRules: cloneRows(d.eventRules)}
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneRows[T any](m map[int]*T) map[int]*T {
	out := make(map[int]*T, len(m))
	for k, v := range m {
		row := *v
		out[k] = &row
	}
	return out
}

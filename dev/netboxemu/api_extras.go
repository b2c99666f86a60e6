package netboxemu

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// /api/status/, /api/authentication-check/ and /api/extras/journal-entries/
// (reference/netbox.md §3.4).

func (e *Emulator) getStatus(c *reqCtx) {
	c.write(http.StatusOK, obj{{"django-version", "5.2.9"}, {"hostname", "netboxemu"},
		{"installed_apps", obj{}}, {"netbox-version", Version}, {"netbox-full-version", Version},
		{"plugins", obj{}}, {"python-version", "3.12.3"}, {"rq-workers-running", e.cfg.Workers}})
}

func (e *Emulator) getAuthCheck(c *reqCtx) {
	u := c.user
	path := fmt.Sprintf("users/users/%d/", u.id)
	c.write(http.StatusOK, obj{{"id", u.id}, {"url", c.rc.api(path)}, {"display_url", c.rc.ui(path)},
		{"display", u.username}, {"username", u.username}, {"first_name", ""}, {"last_name", ""},
		{"email", ""}, {"is_active", true}, {"date_joined", restTime(time.Unix(0, 0))}, {"last_login", nil},
		{"groups", []any{}}, {"permissions", []any{}}})
}

func (e *Emulator) listJournal(c *reqCtx) {
	ids, ok1 := c.intFilter("id")
	objIDs, ok2 := c.intFilter("assigned_object_id")
	if !ok1 || !ok2 {
		return
	}
	types, kinds := c.strFilter("assigned_object_type"), c.strFilter("kind")
	newestFirst := func(a, b *journalEntry) bool { return a.created.After(b.created) }
	var match []*journalEntry
	for _, id := range sortedIDs(e.db.journal, newestFirst) {
		j := e.db.journal[id]
		if pass(ids, j.id) && pass(objIDs, j.objID) && pass(types, j.objType) && pass(kinds, j.kind) {
			match = append(match, j)
		}
	}
	c.page(len(match), func(i int) obj { return e.renderJournal(c.rc, match[i]) })
}

func (e *Emulator) getJournal(c *reqCtx) {
	id, ok := c.id()
	if !ok {
		return
	}
	j, found := e.db.journal[id]
	if !found {
		c.detail(http.StatusNotFound, "No JournalEntry matches the given query.")
		return
	}
	c.w.Header().Set("ETag", etag(j.lastUpdated))
	c.write(http.StatusOK, e.renderJournal(c.rc, j))
}

// createJournal is JournalEntrySerializer: created_by defaults to the token's user, kind to
// info; the assigned object must exist. A journal entry is its own object: it does not update
// the device (no dcim.device event).
func (e *Emulator) createJournal(c *reqCtx) {
	body := c.body()
	if body == nil {
		return
	}
	errs := obj{}
	j := &journalEntry{kind: "info", createdBy: c.user.id}
	t, _ := body.get("assigned_object_type")
	j.objType, _ = t.(string)
	if j.objType == "" {
		errs = append(errs, field{"assigned_object_type", []any{"This field is required."}})
	} else if !strings.Contains(j.objType, ".") {
		errs = append(errs, field{"assigned_object_type", []any{"Object type not found: " + j.objType}})
	}
	idv, hasID := body.get("assigned_object_id")
	if id, err := strconv.Atoi(pyStr(idv)); hasID && err == nil {
		j.objID = id
	} else {
		errs = append(errs, field{"assigned_object_id", []any{"A valid integer is required."}})
	}
	if v, ok := body.get("kind"); ok {
		s, _ := v.(string)
		if _, valid := journalKindLabels[s]; !valid {
			errs = append(errs, field{"kind", []any{`"` + pyStr(v) + `" is not a valid choice.`}})
		}
		j.kind = s
	}
	if v, ok := body.get("comments"); !ok {
		errs = append(errs, field{"comments", []any{"This field is required."}})
	} else if s, isStr := v.(string); !isStr || strings.TrimSpace(s) == "" {
		errs = append(errs, field{"comments", []any{"This field may not be blank."}})
	} else {
		j.comments = s
	}
	if len(errs) > 0 {
		c.invalid(errs)
		return
	}
	if _, exists := e.db.devices[j.objID]; j.objType != "dcim.device" || !exists {
		c.invalid(obj{{"non_field_errors", []any{fmt.Sprintf("Invalid assigned_object: %s ID %d", strings.Replace(j.objType, ".", " | ", 1), j.objID)}}})
		return
	}
	j.id = e.db.next("journalentry")
	j.created = c.touch(time.Time{})
	j.lastUpdated = j.created
	e.db.journal[j.id] = j
	c.w.Header().Set("ETag", etag(j.lastUpdated))
	c.write(http.StatusCreated, e.renderJournal(c.rc, j))
}

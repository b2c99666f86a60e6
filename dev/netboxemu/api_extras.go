package netboxemu

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// /api/, /api/status/, /api/authentication-check/ and the writes of
// /api/extras/journal-entries/ (NetBox's extras/api/serializers_/journaling.py, extras/choices.py
// JournalEntryKindChoices).

// getRoot is APIRootView (NB@v4.6.8:netbox/netbox/api/views.py): the apps' API roots. With
// LOGIN_REQUIRED (the default) it needs a token like every other endpoint.
func (e *Emulator) getRoot(c *reqCtx) {
	o := obj{}
	for _, app := range []string{"circuits", "core", "dcim", "extras", "ipam", "plugins", "status", "tenancy",
		"users", "virtualization", "vpn", "wireless"} {
		o = append(o, field{app, c.rc.api(app + "/")})
	}
	c.write(http.StatusOK, o)
}

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

// newJournal is JournalEntrySerializer's create: created_by defaults to the token's user,
// kind to info; the assigned object must exist. A journal entry is its own object: it does not
// update the device (no dcim.device event).
func (e *Emulator) newJournal(c *reqCtx, body obj) (int, bool) {
	j := &journalEntry{kind: "info", createdBy: c.user.id}
	if !c.applyJournal(j, body, true) {
		return 0, false
	}
	j.id = e.db.next("journalentry")
	j.created = c.touch(time.Time{})
	j.lastUpdated = j.created
	e.db.journal[j.id] = j
	c.enqueue("extras.journalentry", j.id, "object_created", nil, e.snapJournal(j), nil)
	return j.id, true
}

func (e *Emulator) saveJournal(c *reqCtx, id int, body obj, partial bool) bool {
	j := e.db.journal[id]
	next := *j
	if !c.applyJournal(&next, body, !partial) {
		return false
	}
	pre := e.snapJournal(j)
	next.lastUpdated = c.touch(j.lastUpdated)
	*j = next
	c.enqueue("extras.journalentry", j.id, "object_updated", pre, e.snapJournal(j), nil)
	return true
}

func (e *Emulator) removeJournal(c *reqCtx, id int) bool {
	j := e.db.journal[id]
	c.enqueue("extras.journalentry", j.id, "object_deleted", e.snapJournal(j), nil, e.renderJournal(rc{}, j))
	delete(e.db.journal, id)
	return true
}

// applyJournal validates the writable fields of a journal entry; required is true on create
// and PUT. It answers 400 and returns false on any error.
func (c *reqCtx) applyJournal(j *journalEntry, body obj, required bool) bool {
	errs := obj{}
	bad := func(k, msg string) { errs = append(errs, field{k, []any{msg}}) }
	if t, ok := body.get("assigned_object_type"); ok || required {
		j.objType, _ = t.(string)
		if j.objType == "" {
			bad("assigned_object_type", "This field is required.")
		} else if !strings.Contains(j.objType, ".") {
			bad("assigned_object_type", "Object type not found: "+j.objType)
		}
	}
	if idv, ok := body.get("assigned_object_id"); ok || required {
		if id, err := strconv.Atoi(pyStr(idv)); ok && err == nil {
			j.objID = id
		} else {
			bad("assigned_object_id", "A valid integer is required.")
		}
	}
	if v, ok := body.get("kind"); ok {
		s, _ := v.(string)
		if _, valid := journalKindLabels[s]; !valid {
			bad("kind", `"`+pyStr(v)+`" is not a valid choice.`)
		}
		j.kind = s
	}
	if v, ok := body.get("comments"); !ok && required {
		bad("comments", "This field is required.")
	} else if s, isStr := v.(string); ok && (!isStr || strings.TrimSpace(s) == "") {
		bad("comments", "This field may not be blank.")
	} else if ok {
		j.comments = s
	}
	if len(errs) > 0 {
		c.invalid(errs)
		return false
	}
	if _, exists := c.e.db.devices[j.objID]; j.objType != "dcim.device" || !exists {
		c.invalid(obj{{"non_field_errors", []any{fmt.Sprintf("Invalid assigned_object: %s ID %d", strings.Replace(j.objType, ".", " | ", 1), j.objID)}}})
		return false
	}
	return true
}

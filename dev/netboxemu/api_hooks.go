package netboxemu

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Writes of /api/extras/webhooks/ and event-rules/ (WebhookSerializer, EventRuleSerializer at
// NB@v4.6.8), and the API's create/update/delete of every extras object of the schema.

// eventTypes are NetBox's built-in event types (NB@v4.6.8:netbox/core/events.py), the choices
// of EventRule.event_types.
var eventTypes = []string{"object_created", "object_updated", "object_deleted", "job_started",
	"job_completed", "job_failed", "job_errored"}

var httpMethods = map[string]string{"GET": "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE"}

func (e *Emulator) addWebhook(body obj, now time.Time) (*webhook, obj) {
	w := &webhook{httpMethod: "POST", contentType: "application/json", sslVerification: true, created: now, lastUpdated: now}
	if errs := e.applyWebhook(w, &input{body: body, full: true}); errs != nil {
		return nil, errs
	}
	w.id = e.db.next("webhook")
	e.db.webhooks[w.id] = w
	return w, nil
}

func (e *Emulator) applyWebhook(w *webhook, in *input) obj {
	w.name, w.description = in.str("name", w.name, true), in.str("description", w.description, false)
	w.payloadURL = in.str("payload_url", w.payloadURL, true)
	w.httpMethod = in.choice("http_method", w.httpMethod, httpMethods)
	w.contentType = in.str("http_content_type", w.contentType, false)
	w.additionalHeaders = in.str("additional_headers", w.additionalHeaders, false)
	w.secret = in.str("secret", w.secret, false)
	w.sslVerification = in.boolean("ssl_verification", w.sslVerification)
	if in.str("body_template", "", false) != "" {
		in.bad("body_template", "The NetBox emulator does not render Jinja2 templates; leave body_template empty.")
	}
	if v, _ := in.body.get("ca_file_path"); v != nil && v != "" {
		in.bad("ca_file_path", "The NetBox emulator sends webhooks with its own HTTP client; leave ca_file_path empty.")
	}
	for _, other := range e.db.webhooks {
		if other.name == w.name && other.id != w.id {
			in.bad("name", "webhook with this name already exists.")
		}
	}
	return in.errs
}

func (e *Emulator) addEventRule(body obj, now time.Time) (*eventRule, obj) {
	r := &eventRule{enabled: true, created: now, lastUpdated: now}
	if errs := e.applyEventRule(r, &input{body: body, full: true}); errs != nil {
		return nil, errs
	}
	r.id = e.db.next("eventrule")
	e.db.eventRules[r.id] = r
	return r, nil
}

func (e *Emulator) applyEventRule(r *eventRule, in *input) obj {
	r.name, r.description = in.str("name", r.name, true), in.str("description", r.description, false)
	r.objectTypes, r.eventTypes = in.strs("object_types", r.objectTypes), in.strs("event_types", r.eventTypes)
	r.enabled = in.boolean("enabled", r.enabled)
	for _, et := range r.eventTypes {
		if !slices.Contains(eventTypes, et) {
			in.bad("event_types", `"`+et+`" is not a valid choice.`)
		}
	}
	if t := in.str("action_type", "webhook", false); t != "webhook" {
		in.bad("action_type", "The NetBox emulator runs only webhook actions.")
	}
	if t := in.str("action_object_type", "extras.webhook", in.full); t != "extras.webhook" {
		in.bad("action_object_type", "The NetBox emulator runs only webhooks (extras.webhook).")
	}
	if v, ok := in.body.get("action_object_id"); ok || in.full {
		r.webhook, _ = relatedID(v, func(id int) bool { _, ok := e.db.webhooks[id]; return ok })
		if r.webhook == 0 {
			in.bad("action_object_id", "Related object not found: give the id of a webhook.")
		}
	}
	for _, other := range e.db.eventRules {
		if other.name == r.name && other.id != r.id {
			in.bad("name", "event rule with this name already exists.")
		}
	}
	// The serializer's fields are validated first; EventRule.clean, which checks the
	// conditions, runs only when they all are valid.
	if v, ok := in.body.get("conditions"); ok && len(in.errs) == 0 {
		cond, err := parseConditions(v)
		var refused *ruleError
		var raised *pyException
		switch {
		case errors.As(err, &refused):
			in.bad("conditions", refused.msg)
		case errors.As(err, &raised):
			in.raise(raised)
		}
		r.conditions, r.cond = v, cond
	}
	return in.errs
}

// apiCreate wraps an add function for the API: 400 on errors, else the change record and event.
func apiCreate[T interface{ getID() int }](c *reqCtx, objectType string, body obj, add func(obj, time.Time) (T, obj), snap func(int) obj) (int, bool) {
	v, errs := add(body, c.touch(time.Time{}))
	if errs != nil {
		c.invalid(errs)
		return 0, false
	}
	id := v.getID()
	c.enqueue(objectType, id, "object_created", nil, snap(id), nil)
	return id, true
}

// apiSave applies a body to a copy of a row and commits it when valid.
func apiSave[T any](c *reqCtx, res *resource, row *T, id int, body obj, partial bool, apply func(*T, *input) obj, touch func(*T)) bool {
	next := *row
	if errs := apply(&next, &input{body: body, full: !partial}); errs != nil {
		c.invalid(errs)
		return false
	}
	pre := res.snapshot(id)
	touch(&next)
	*row = next
	c.enqueue(res.objectType, id, "object_updated", pre, res.snapshot(id), nil)
	return true
}

// removeChoiceSet refuses while custom fields use the set (on_delete=PROTECT: 409).
func (e *Emulator) removeChoiceSet(c *reqCtx, id int) bool {
	cs := e.db.choiceSets[id]
	if deps := e.dependents(cs); len(deps) > 0 {
		c.detail(http.StatusConflict, fmt.Sprintf("Unable to delete object. %d dependent objects were found: %s", len(deps), strings.Join(deps, ", ")))
		return false
	}
	c.enqueue("extras.customfieldchoiceset", id, "object_deleted", e.snapChoiceSet(cs), nil, e.renderChoiceSet(rc{}, cs))
	delete(e.db.choiceSets, id)
	return true
}

// removeCustomField deletes a field; its values leave every object's data (no change record).
func (e *Emulator) removeCustomField(c *reqCtx, id int) bool {
	cf := e.db.customFields[id]
	c.enqueue("extras.customfield", id, "object_deleted", e.snapCustomField(cf), nil, e.renderCustomField(rc{}, cf))
	delete(e.db.customFields, id)
	for _, d := range e.db.devices {
		if _, set := d.cf[cf.name]; set {
			d.cf = withoutKey(d.cf, cf.name)
		}
	}
	return true
}

// removeWebhook deletes a webhook and, by cascade (Webhook.events), the event rules running it.
func (e *Emulator) removeWebhook(c *reqCtx, id int) bool {
	for _, rid := range sortedIDs(e.db.eventRules, byID[*eventRule]) {
		if r := e.db.eventRules[rid]; r.webhook == id {
			e.removeEventRule(c, rid)
		}
	}
	w := e.db.webhooks[id]
	c.enqueue("extras.webhook", id, "object_deleted", e.snapWebhook(w), nil, e.renderWebhook(rc{}, w))
	delete(e.db.webhooks, id)
	return true
}

func (e *Emulator) removeEventRule(c *reqCtx, id int) bool {
	r := e.db.eventRules[id]
	c.enqueue("extras.eventrule", id, "object_deleted", e.snapEventRule(r), nil, e.renderEventRule(rc{}, r))
	delete(e.db.eventRules, id)
	return true
}

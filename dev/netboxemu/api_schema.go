package netboxemu

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/folly-infra/fleetd/netbox"
)

// /api/extras/custom-fields/, custom-field-choice-sets/, webhooks/ and event-rules/: list and
// create. The same create functions serve LoadSchema, so seeded and API-made objects agree.

var cfNameRE = regexp.MustCompile(`^[a-z0-9_]+$`)

func (e *Emulator) listCustomFields(c *reqCtx) {
	ids := sortedIDs(e.db.customFields, func(a, b *customField) bool { return a.name < b.name })
	c.page(len(ids), func(i int) obj { return e.renderCustomField(c.rc, e.db.customFields[ids[i]]) })
}

func (e *Emulator) listChoiceSets(c *reqCtx) {
	ids := sortedIDs(e.db.choiceSets, func(a, b *choiceSet) bool { return a.name < b.name })
	c.page(len(ids), func(i int) obj { return e.renderChoiceSet(c.rc, e.db.choiceSets[ids[i]]) })
}

func (e *Emulator) listWebhooks(c *reqCtx) {
	ids := sortedIDs(e.db.webhooks, func(a, b *webhook) bool { return a.name < b.name })
	c.page(len(ids), func(i int) obj { return e.renderWebhook(c.rc, e.db.webhooks[ids[i]]) })
}

func (e *Emulator) listEventRules(c *reqCtx) {
	ids := sortedIDs(e.db.eventRules, func(a, b *eventRule) bool { return a.name < b.name })
	c.page(len(ids), func(i int) obj { return e.renderEventRule(c.rc, e.db.eventRules[ids[i]]) })
}

// create runs a create function on the request body and answers 201 or 400.
func create[T any](c *reqCtx, fn func(obj, time.Time) (T, obj), render func(T) obj) {
	body := c.body()
	if body == nil {
		return
	}
	v, errs := fn(body, c.touch(time.Time{}))
	if errs != nil {
		c.invalid(errs)
		return
	}
	c.write(http.StatusCreated, render(v))
}

func (e *Emulator) createCustomField(c *reqCtx) {
	create(c, e.addCustomField, func(v *customField) obj { return e.renderCustomField(c.rc, v) })
}

func (e *Emulator) createChoiceSet(c *reqCtx) {
	create(c, e.addChoiceSet, func(v *choiceSet) obj { return e.renderChoiceSet(c.rc, v) })
}

func (e *Emulator) createWebhook(c *reqCtx) {
	create(c, e.addWebhook, func(v *webhook) obj { return e.renderWebhook(c.rc, v) })
}

func (e *Emulator) createEventRule(c *reqCtx) {
	create(c, e.addEventRule, func(v *eventRule) obj { return e.renderEventRule(c.rc, v) })
}

// input helpers: typed reads of a request body with DRF's messages collected in errs.
type input struct {
	body obj
	errs obj
}

func (in *input) bad(k, msg string) { in.errs = append(in.errs, field{k, []any{msg}}) }

func (in *input) str(k, def string, required bool) string {
	v, ok := in.body.get(k)
	if !ok || v == nil {
		if required {
			in.bad(k, "This field is required.")
		}
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		in.bad(k, "Not a valid string.")
	}
	if required && s == "" {
		in.bad(k, "This field may not be blank.")
	}
	return s
}

func (in *input) strs(k string) []string {
	v, _ := in.body.get(k)
	list, _ := v.([]any)
	var out []string
	for _, item := range list {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 || len(out) != len(list) {
		in.bad(k, "This list may not be empty.")
	}
	return out
}

func (in *input) boolean(k string, def bool) bool {
	v, ok := in.body.get(k)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		in.bad(k, "Must be a valid boolean.")
	}
	return b
}

func (in *input) integer(k string, def int) int {
	v, ok := in.body.get(k)
	if !ok {
		return def
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil {
		in.bad(k, "A valid integer is required.")
	}
	return int(i)
}

func (e *Emulator) addChoiceSet(body obj, now time.Time) (*choiceSet, obj) {
	in := &input{body: body}
	cs := &choiceSet{name: in.str("name", "", true), description: in.str("description", "", false),
		created: now, lastUpdated: now}
	v, _ := body.get("extra_choices")
	list, _ := v.([]any)
	for _, item := range list {
		pair, _ := item.([]any)
		if len(pair) != 2 {
			in.bad("extra_choices", "Each choice must be a [value, label] pair.")
			continue
		}
		val, _ := pair[0].(string)
		label, _ := pair[1].(string)
		cs.choices = append(cs.choices, [2]string{val, label})
	}
	for _, other := range e.db.choiceSets {
		if other.name == cs.name {
			in.bad("name", "custom field choice set with this name already exists.")
		}
	}
	if in.errs != nil {
		return nil, in.errs
	}
	cs.id = e.db.next("choiceset")
	e.db.choiceSets[cs.id] = cs
	return cs, nil
}

func (e *Emulator) addCustomField(body obj, now time.Time) (*customField, obj) {
	in := &input{body: body}
	cf := &customField{name: in.str("name", "", true), label: in.str("label", "", false),
		typ: in.str("type", "text", false), objectTypes: in.strs("object_types"),
		groupName: in.str("group_name", "", false), weight: in.integer("weight", 100),
		description: in.str("description", "", false), required: in.boolean("required", false),
		uiVisible: in.str("ui_visible", "always", false), uiEditable: in.str("ui_editable", "yes", false),
		validationRegex: in.str("validation_regex", "", false), created: now, lastUpdated: now}
	cf.def, _ = body.get("default")
	if !cfNameRE.MatchString(cf.name) {
		in.bad("name", "Only alphanumeric characters and underscores are allowed.")
	}
	if _, ok := cfTypeLabels[cf.typ]; !ok {
		in.bad("type", `"`+cf.typ+`" is not a valid choice.`)
	}
	if v, ok := body.get("choice_set"); ok && v != nil {
		id, msg := relatedID(v, func(id int) bool { _, ok := e.db.choiceSets[id]; return ok })
		if msg != "" {
			in.bad("choice_set", msg)
		}
		cf.choiceSet = id
	}
	if (cf.typ == "select" || cf.typ == "multiselect") && cf.choiceSet == 0 {
		in.bad("choice_set", "Selection fields must specify a set of choices.")
	}
	for _, other := range e.db.customFields {
		if other.name == cf.name {
			in.bad("name", "custom field with this name already exists.")
		}
	}
	if in.errs != nil {
		return nil, in.errs
	}
	cf.id = e.db.next("customfield")
	e.db.customFields[cf.id] = cf
	return cf, nil
}

func (e *Emulator) addWebhook(body obj, now time.Time) (*webhook, obj) {
	in := &input{body: body}
	w := &webhook{name: in.str("name", "", true), description: in.str("description", "", false),
		payloadURL: in.str("payload_url", "", true), httpMethod: in.str("http_method", "POST", false),
		contentType:       in.str("http_content_type", "application/json", false),
		additionalHeaders: in.str("additional_headers", "", false), secret: in.str("secret", "", false),
		sslVerification: in.boolean("ssl_verification", true), created: now, lastUpdated: now}
	if in.str("body_template", "", false) != "" {
		in.bad("body_template", "The NetBox emulator does not render Jinja2 templates; leave body_template empty.")
	}
	if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, w.httpMethod) {
		in.bad("http_method", `"`+w.httpMethod+`" is not a valid choice.`)
	}
	for _, other := range e.db.webhooks {
		if other.name == w.name {
			in.bad("name", "webhook with this name already exists.")
		}
	}
	if in.errs != nil {
		return nil, in.errs
	}
	w.id = e.db.next("webhook")
	e.db.webhooks[w.id] = w
	return w, nil
}

func (e *Emulator) addEventRule(body obj, now time.Time) (*eventRule, obj) {
	in := &input{body: body}
	r := &eventRule{name: in.str("name", "", true), description: in.str("description", "", false),
		objectTypes: in.strs("object_types"), eventTypes: in.strs("event_types"),
		enabled: in.boolean("enabled", true), created: now, lastUpdated: now}
	for _, et := range r.eventTypes {
		if !slices.Contains(netbox.EventTypes, et) {
			in.bad("event_types", `"`+et+`" is not a valid choice.`)
		}
	}
	if t := in.str("action_type", "webhook", false); t != "webhook" {
		in.bad("action_type", "The NetBox emulator runs only webhook actions.")
	}
	if v, ok := body.get("action_object_id"); ok {
		r.webhook, _ = relatedID(v, func(id int) bool { _, ok := e.db.webhooks[id]; return ok })
	}
	if r.webhook == 0 {
		in.bad("action_object_id", "Related object not found: give the id of a webhook.")
	}
	if v, ok := body.get("conditions"); ok && v != nil {
		raw, _ := json.Marshal(v)
		cond, err := netbox.ParseConditions(raw)
		if err != nil {
			in.bad("conditions", err.Error())
		}
		r.conditions, r.cond = v, cond
	}
	for _, other := range e.db.eventRules {
		if other.name == r.name {
			in.bad("name", "event rule with this name already exists.")
		}
	}
	if in.errs != nil {
		return nil, in.errs
	}
	r.id = e.db.next("eventrule")
	e.db.eventRules[r.id] = r
	return r, nil
}

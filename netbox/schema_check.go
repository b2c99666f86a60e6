package netbox

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	// NetBox's CustomField.name validators: ^[a-z0-9_]+$ and no double underscore.
	cfName     = regexp.MustCompile(`^[a-z0-9_]+$`)
	objectType = regexp.MustCompile(`^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$`)
)

// build converts the decoded file into a Schema, reporting values that cannot be converted.
func (f schemaFile) build() (Schema, []string) {
	var s Schema
	var problems []string
	for i, c := range f.ChoiceSets {
		cs := ChoiceSet{Name: c.Name, Description: c.Description}
		for j, pair := range c.ExtraChoices {
			if len(pair) != 2 {
				problems = append(problems, fmt.Sprintf("choice set %s: extra_choices[%d] must be [value, label]", name(c.Name, i), j))
				continue
			}
			cs.Choices = append(cs.Choices, Choice{Value: pair[0], Label: pair[1]})
		}
		s.ChoiceSets = append(s.ChoiceSets, cs)
	}
	for _, c := range f.CustomFields {
		cf := CustomField{Name: c.Name, Label: c.Label, Type: c.Type, ObjectTypes: c.ObjectTypes,
			ChoiceSet: c.ChoiceSet, GroupName: c.GroupName, Weight: 100, Description: c.Description,
			Required: c.Required, UIVisible: or(c.UIVisible, "always"), UIEditable: or(c.UIEditable, "yes"),
			ValidationRegex: c.ValidationRegex}
		if c.Weight != nil {
			cf.Weight = *c.Weight
		}
		if len(c.Default) > 0 && string(c.Default) != "null" {
			if err := json.Unmarshal(c.Default, &cf.Default); err != nil {
				problems = append(problems, fmt.Sprintf("custom field %s: default: %v", c.Name, err))
			}
		}
		s.CustomFields = append(s.CustomFields, cf)
	}
	for _, w := range f.Webhooks {
		s.Webhooks = append(s.Webhooks, Webhook{Name: w.Name, Description: w.Description, Path: w.Path,
			HTTPMethod: or(w.HTTPMethod, "POST"), ContentType: or(w.HTTPContentType, "application/json"),
			Signed: w.Signed == nil || *w.Signed})
	}
	for i, r := range f.EventRules {
		er := EventRule{Name: r.Name, Description: r.Description, ObjectTypes: r.ObjectTypes,
			EventTypes: r.EventTypes, Webhook: r.Webhook, Enabled: r.Enabled == nil || *r.Enabled}
		if len(r.Conditions) > 0 {
			c, err := ParseConditions(r.Conditions)
			if err != nil {
				problems = append(problems, fmt.Sprintf("event rule %s: conditions: %v", name(r.Name, i), err))
			}
			er.Conditions = c
		}
		s.EventRules = append(s.EventRules, er)
	}
	return s, problems
}

// check validates the schema as a whole and returns every problem.
func (s Schema) check() []string {
	var p []string
	p = append(p, duplicates("choice set", len(s.ChoiceSets), func(i int) string { return s.ChoiceSets[i].Name })...)
	p = append(p, duplicates("custom field", len(s.CustomFields), func(i int) string { return s.CustomFields[i].Name })...)
	p = append(p, duplicates("webhook", len(s.Webhooks), func(i int) string { return s.Webhooks[i].Name })...)
	p = append(p, duplicates("event rule", len(s.EventRules), func(i int) string { return s.EventRules[i].Name })...)
	for i, c := range s.ChoiceSets {
		p = append(p, c.check(i)...)
	}
	for i, f := range s.CustomFields {
		p = append(p, s.checkField(i, f)...)
	}
	used := map[string]bool{}
	for i, r := range s.EventRules {
		used[r.Webhook] = true
		p = append(p, s.checkRule(i, r)...)
	}
	for i, w := range s.Webhooks {
		p = append(p, w.check(i)...)
		if w.Name != "" && !used[w.Name] {
			p = append(p, fmt.Sprintf("webhook %s is the action of no event rule, so NetBox never sends it", w.Name))
		}
	}
	return append(p, s.checkFleetdFields()...)
}

func (c ChoiceSet) check(i int) []string {
	var p []string
	if c.Name == "" {
		p = append(p, fmt.Sprintf("choice set #%d has no name", i+1))
	}
	if len(c.Choices) == 0 {
		p = append(p, fmt.Sprintf("choice set %s has no extra_choices", name(c.Name, i)))
	}
	p = append(p, duplicates("choice set "+c.Name+" value", len(c.Choices), func(j int) string { return c.Choices[j].Value })...)
	return p
}

func (s Schema) checkField(i int, f CustomField) []string {
	var p []string
	n := name(f.Name, i)
	if !cfName.MatchString(f.Name) || strings.Contains(f.Name, "__") {
		p = append(p, fmt.Sprintf("custom field %s: name must be lowercase letters, digits and single underscores", n))
	}
	if !slices.Contains(CustomFieldTypes, f.Type) {
		p = append(p, fmt.Sprintf("custom field %s: type %q is not one of %s", n, f.Type, strings.Join(CustomFieldTypes, ", ")))
	}
	if len(f.ObjectTypes) == 0 {
		p = append(p, fmt.Sprintf("custom field %s: object_types is empty", n))
	}
	for _, ot := range f.ObjectTypes {
		if !objectType.MatchString(ot) {
			p = append(p, fmt.Sprintf("custom field %s: object type %q is not app.model", n, ot))
		}
	}
	selecty := f.Type == "select" || f.Type == "multiselect"
	cs, found := s.ChoiceSet(f.ChoiceSet)
	switch {
	case selecty && f.ChoiceSet == "":
		p = append(p, fmt.Sprintf("custom field %s: a %s field needs a choice_set", n, f.Type))
	case selecty && !found:
		p = append(p, fmt.Sprintf("custom field %s: choice set %q is not defined in choice_sets", n, f.ChoiceSet))
	case !selecty && f.ChoiceSet != "":
		p = append(p, fmt.Sprintf("custom field %s: only select and multiselect fields take a choice_set", n))
	}
	if f.Default != nil && f.Type == "select" && found {
		if v, ok := f.Default.(string); !ok || !slices.Contains(cs.Values(), v) {
			p = append(p, fmt.Sprintf("custom field %s: default %v is not a value of choice set %s", n, f.Default, cs.Name))
		}
	}
	if !slices.Contains([]string{"always", "if-set", "hidden"}, f.UIVisible) {
		p = append(p, fmt.Sprintf("custom field %s: ui_visible %q is not always, if-set or hidden", n, f.UIVisible))
	}
	if !slices.Contains([]string{"yes", "no", "hidden"}, f.UIEditable) {
		p = append(p, fmt.Sprintf("custom field %s: ui_editable %q is not yes, no or hidden (quote it)", n, f.UIEditable))
	}
	return p
}

func (w Webhook) check(i int) []string {
	var p []string
	n := name(w.Name, i)
	if w.Path != WebhookPathPrefix && !strings.HasPrefix(w.Path, WebhookPathPrefix+"/") {
		p = append(p, fmt.Sprintf("webhook %s: path %q does not start with %s, where fleetd serves webhooks", n, w.Path, WebhookPathPrefix))
	}
	if strings.ContainsAny(w.Path, "?#{}") {
		p = append(p, fmt.Sprintf("webhook %s: path %q must be a plain path (no query, fragment or template)", n, w.Path))
	}
	if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, w.HTTPMethod) {
		p = append(p, fmt.Sprintf("webhook %s: http_method %q is not GET, POST, PUT, PATCH or DELETE", n, w.HTTPMethod))
	} else if w.HTTPMethod != "POST" {
		p = append(p, fmt.Sprintf("webhook %s: http_method %s: fleetd accepts webhooks only by POST", n, w.HTTPMethod))
	}
	if !w.Signed {
		p = append(p, fmt.Sprintf("webhook %s: signed is false, but fleetd refuses deliveries without X-Hook-Signature", n))
	}
	return p
}

func (s Schema) checkRule(i int, r EventRule) []string {
	var p []string
	n := name(r.Name, i)
	if len(r.ObjectTypes) == 0 {
		p = append(p, fmt.Sprintf("event rule %s: object_types is empty", n))
	}
	for _, ot := range r.ObjectTypes {
		if !objectType.MatchString(ot) {
			p = append(p, fmt.Sprintf("event rule %s: object type %q is not app.model", n, ot))
		}
	}
	if len(r.EventTypes) == 0 {
		p = append(p, fmt.Sprintf("event rule %s: event_types is empty", n))
	}
	for _, et := range r.EventTypes {
		if !slices.Contains(EventTypes, et) {
			p = append(p, fmt.Sprintf("event rule %s: event type %q is not one of %s", n, et, strings.Join(EventTypes, ", ")))
		}
	}
	if _, ok := s.Webhook(r.Webhook); !ok {
		p = append(p, fmt.Sprintf("event rule %s: webhook %q is not defined in webhooks", n, r.Webhook))
	}
	if r.Conditions != nil {
		for _, leaf := range r.Conditions.Leaves() {
			p = append(p, s.checkLeaf(n, r.ObjectTypes, leaf)...)
		}
	}
	return p
}

// checkLeaf finds conditions NetBox accepts but that cannot mean what they say: a custom field
// the object type does not have (the key is missing from the event's data: the rule is false,
// negated or not), or a value that is not a choice of the field or a device status (an eq
// that is never true, or, negated, always true).
func (s Schema) checkLeaf(rule string, objectTypes []string, c Condition) []string {
	var values []any
	switch c.Op {
	case "eq":
		values = []any{c.Value}
	case "in":
		values, _ = c.Value.([]any)
	}
	var allowed []string
	var what string
	if cfName, ok := strings.CutPrefix(c.Attr, "custom_fields."); ok && !strings.Contains(cfName, ".") {
		f, found := s.CustomField(cfName)
		for _, ot := range objectTypes {
			if !found || !slices.Contains(f.ObjectTypes, ot) {
				return []string{fmt.Sprintf("event rule %s: condition on %s can never match: %s is not a custom field of %s", rule, c.Attr, cfName, ot)}
			}
		}
		if cs, ok := s.ChoiceSet(f.ChoiceSet); ok && f.Type == "select" {
			allowed, what = cs.Values(), "choice set "+cs.Name
		}
	} else if c.Attr == "status.value" && slices.Equal(objectTypes, []string{"dcim.device"}) {
		allowed, what = DeviceStatuses, "device statuses"
	}
	if allowed == nil {
		return nil
	}
	var p []string
	for _, v := range values {
		if str, ok := v.(string); v == nil || ok && slices.Contains(allowed, str) {
			continue
		}
		// The attribute never holds v: an eq is never true, so negated it is always true; an
		// in never matches on v, negated or not.
		outcome := "can never match"
		switch {
		case c.Op == "in":
			outcome = fmt.Sprintf("can never match on %v", v)
		case c.Negate:
			outcome = "is negated, so it matches every event"
		}
		p = append(p, fmt.Sprintf("event rule %s: condition %s %s %v %s: %v is not in %s (%s)", rule, c.Attr, c.Op, c.Value, outcome, v, what, strings.Join(allowed, ", ")))
	}
	return p
}

func duplicates(what string, n int, key func(int) string) []string {
	seen := map[string]bool{}
	var p []string
	for i := 0; i < n; i++ {
		k := key(i)
		if k != "" && seen[k] {
			p = append(p, fmt.Sprintf("%s %q is defined more than once", what, k))
		}
		seen[k] = true
	}
	return p
}

func name(n string, i int) string {
	if n == "" {
		return fmt.Sprintf("#%d (no name)", i+1)
	}
	return n
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package netboxemu

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Writes of /api/extras/custom-fields/ and custom-field-choice-sets/ (CustomFieldSerializer,
// CustomFieldChoiceSetSerializer at NB@v4.6.8). add* validate and insert without a request, for
// LoadSchema as for the API; the API's new*/save*/remove* add the change record and the event.

var cfNameRE = regexp.MustCompile(`^[a-z0-9_]+$`)

// input reads a request body with DRF's messages collected in errs. full is true on create and
// PUT: a required field must then be present; an absent field keeps its current value.
type input struct {
	body obj
	errs obj
	full bool
}

func (in *input) bad(k, msg string) { in.errs = append(in.errs, field{k, []any{msg}}) }

// raisedKey holds, alone in an input's errs, an exception the validation raised and NetBox does
// not catch: the request is answered 500 (reqCtx.invalid), not 400.
const raisedKey = "\x00raised"

func (in *input) raise(ex *pyException) { in.errs = obj{{raisedKey, ex}} }

// raised is the exception errs carries, if any.
func raised(errs obj) *pyException {
	v, _ := errs.get(raisedKey)
	ex, _ := v.(*pyException)
	return ex
}

func (in *input) has(k string) bool { _, ok := in.body.get(k); return ok }

func (in *input) str(k, cur string, required bool) string {
	v, ok := in.body.get(k)
	if !ok || v == nil {
		if required && (in.full || ok) {
			in.bad(k, "This field is required.")
		}
		return cur
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

func (in *input) strs(k string, cur []string) []string {
	v, ok := in.body.get(k)
	if !ok {
		if in.full {
			in.bad(k, "This field is required.")
		}
		return cur
	}
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

func (in *input) boolean(k string, cur bool) bool {
	v, ok := in.body.get(k)
	if !ok {
		return cur
	}
	b, isBool := v.(bool)
	if !isBool {
		in.bad(k, "Must be a valid boolean.")
	}
	return b
}

func (in *input) integer(k string, cur int) int {
	v, ok := in.body.get(k)
	if !ok {
		return cur
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil {
		in.bad(k, "A valid integer is required.")
	}
	return int(i)
}

// choice reads a ChoiceField: the value must be one of labels' keys.
func (in *input) choice(k, cur string, labels map[string]string) string {
	s := in.str(k, cur, false)
	if _, ok := labels[s]; !ok && in.has(k) {
		in.bad(k, `"`+s+`" is not a valid choice.`)
	}
	return s
}

func (e *Emulator) addChoiceSet(body obj, now time.Time) (*choiceSet, obj) {
	cs := &choiceSet{created: now, lastUpdated: now}
	if errs := e.applyChoiceSet(cs, &input{body: body, full: true}); errs != nil {
		return nil, errs
	}
	cs.id = e.db.next("choiceset")
	e.db.choiceSets[cs.id] = cs
	return cs, nil
}

func (e *Emulator) applyChoiceSet(cs *choiceSet, in *input) obj {
	cs.name = in.str("name", cs.name, true)
	cs.description = in.str("description", cs.description, false)
	if v, ok := in.body.get("extra_choices"); ok {
		list, _ := v.([]any)
		var choices [][2]string // replaced, never changed in place (db.clone)
		for _, item := range list {
			pair, _ := item.([]any)
			val, okV := pairItem(pair, 0)
			label, okL := pairItem(pair, 1)
			if len(pair) != 2 || !okV || !okL {
				in.bad("extra_choices", "Each choice must be a [value, label] pair.")
				continue
			}
			choices = append(choices, [2]string{val, label})
		}
		cs.choices = choices
	}
	for _, other := range e.db.choiceSets {
		if other.name == cs.name && other.id != cs.id {
			in.bad("name", "custom field choice set with this name already exists.")
		}
	}
	return in.errs
}

func pairItem(pair []any, i int) (string, bool) {
	if i >= len(pair) {
		return "", false
	}
	s, ok := pair[i].(string)
	return s, ok
}

func (e *Emulator) addCustomField(body obj, now time.Time) (*customField, obj) {
	cf := &customField{typ: "text", weight: 100, uiVisible: "always", uiEditable: "yes", filterLogic: "loose",
		searchWeight: 1000, created: now, lastUpdated: now}
	if errs := e.applyCustomField(cf, &input{body: body, full: true}, true); errs != nil {
		return nil, errs
	}
	cf.id = e.db.next("customfield")
	e.db.customFields[cf.id] = cf
	e.populateDefault(cf)
	return cf, nil
}

func (e *Emulator) applyCustomField(cf *customField, in *input, creating bool) obj {
	typ := in.choice("type", cf.typ, cfTypeLabels)
	if !creating && typ != cf.typ {
		in.bad("type", "Changing the type of custom fields is not supported.")
	}
	cf.typ = typ
	cf.name, cf.label = in.str("name", cf.name, true), in.str("label", cf.label, false)
	cf.objectTypes = in.strs("object_types", cf.objectTypes)
	cf.groupName, cf.weight = in.str("group_name", cf.groupName, false), in.integer("weight", cf.weight)
	cf.description, cf.required = in.str("description", cf.description, false), in.boolean("required", cf.required)
	cf.uiVisible = in.choice("ui_visible", cf.uiVisible, uiVisibleLabels)
	cf.uiEditable = in.choice("ui_editable", cf.uiEditable, uiEditableLabels)
	cf.filterLogic = in.choice("filter_logic", cf.filterLogic, filterLogicLabels)
	cf.searchWeight = in.integer("search_weight", cf.searchWeight)
	cf.validationRegex = in.str("validation_regex", cf.validationRegex, false)
	if v, ok := in.body.get("default"); ok {
		cf.def = v
	}
	if !cfNameRE.MatchString(cf.name) {
		in.bad("name", "Only alphanumeric characters and underscores are allowed.")
	}
	if v, ok := in.body.get("choice_set"); ok {
		cf.choiceSet = 0
		if v != nil {
			id, msg := relatedID(v, func(id int) bool { _, ok := e.db.choiceSets[id]; return ok })
			if msg != "" {
				in.bad("choice_set", msg)
			}
			cf.choiceSet = id
		}
	}
	if (cf.typ == "select" || cf.typ == "multiselect") && cf.choiceSet == 0 {
		in.bad("choice_set", "Selection fields must specify a set of choices.")
	}
	for _, other := range e.db.customFields {
		if other.name == cf.name && other.id != cf.id {
			in.bad("name", "custom field with this name already exists.")
		}
	}
	return in.errs
}

// populateDefault is CustomField.populate_initial_data: a new field with a default gives every
// existing object of its types that value (a queryset update: no change record, no event).
func (e *Emulator) populateDefault(cf *customField) {
	if cf.def == nil || !slices.Contains(cf.objectTypes, "dcim.device") {
		return
	}
	for _, d := range e.db.devices {
		if _, set := d.cf[cf.name]; !set {
			d.cf = withKey(d.cf, cf.name, cf.def)
		}
	}
}

// withKey and withoutKey return a changed copy of custom-field data (rows' maps are never
// changed in place: db.clone).
func withKey(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

func withoutKey(m map[string]any, k string) map[string]any {
	out := make(map[string]any, len(m))
	for key, val := range m {
		if key != k {
			out[key] = val
		}
	}
	return out
}

// reshapeData follows a changed custom field in the objects' data, as NetBox's signals do with
// queryset updates: a rename moves the key, a field no longer on devices leaves them.
func (e *Emulator) reshapeData(before, after *customField) {
	for _, d := range e.db.devices {
		v, set := d.cf[before.name]
		if !set {
			continue
		}
		switch {
		case !slices.Contains(after.objectTypes, "dcim.device"):
			d.cf = withoutKey(d.cf, before.name)
		case after.name != before.name:
			d.cf = withKey(withoutKey(d.cf, before.name), after.name, v)
		}
	}
}

func (e *Emulator) dependents(cs *choiceSet) []string {
	var out []string
	for _, id := range sortedIDs(e.db.customFields, byID[*customField]) {
		if cf := e.db.customFields[id]; cf.choiceSet == cs.id {
			out = append(out, fmt.Sprintf("%s (%d)", cfDisplay(cf), cf.id))
		}
	}
	return out
}

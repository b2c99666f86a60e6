package netboxemu

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Custom-field writes, as NetBox 4.6.8 does them (NB@v4.6.8:netbox/extras/api/customfields.py
// CustomFieldsDataField.to_internal_value, netbox/models/features.py CustomFieldsMixin.clean,
// extras/models/customfields.py validate, extras/choices.py CustomFieldTypeChoices).

// mergeCFs is CustomFieldsDataField.to_internal_value: it rejects a non-dict and unknown names
// (400 keyed by custom_fields) and merges the incoming keys over the existing data, so omitted
// keys stay and a null clears one key.
func (e *Emulator) mergeCFs(objectType string, existing map[string]any, incoming any) (map[string]any, any) {
	in, ok := incoming.(map[string]any)
	if !ok {
		return nil, []any{"Invalid data format. Custom field data must be passed as a dictionary mapping field names to their values."}
	}
	defined := map[string]bool{}
	for _, cf := range e.db.cfsFor(objectType) {
		defined[cf.name] = true
	}
	var unknown []string
	for k := range in {
		if !defined[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		errs := obj{}
		for _, k := range unknown {
			errs = append(errs, field{k, fmt.Sprintf("Custom field '%s' does not exist for this object type.", k)})
		}
		return nil, errs
	}
	merged := make(map[string]any, len(existing)+len(in))
	for k, v := range existing {
		merged[k] = v
	}
	for k, v := range in {
		merged[k] = v
	}
	return merged, nil
}

// cleanCFs is CustomFieldsMixin.clean followed by save's default filling: stale keys are
// dropped, every value is validated (the first failure is NetBox's one message), required
// fields must be present, and absent fields with a default get it.
func (e *Emulator) cleanCFs(objectType string, data map[string]any) (map[string]any, string) {
	cfs := map[string]*customField{}
	for _, cf := range e.db.cfsFor(objectType) {
		cfs[cf.name] = cf
	}
	out := map[string]any{}
	for _, k := range jsonbKeys(data) {
		if _, ok := cfs[k]; ok {
			out[k] = data[k]
		}
	}
	for _, k := range jsonbKeys(out) {
		if msg := e.validateCF(cfs[k], out[k]); msg != "" {
			return nil, fmt.Sprintf("Invalid value for custom field '%s': %s", k, msg)
		}
	}
	for _, cf := range e.db.cfsFor(objectType) {
		if _, ok := out[cf.name]; !ok {
			if cf.required {
				return nil, fmt.Sprintf("Missing required custom field '%s'.", cf.name)
			}
			if cf.def != nil {
				out[cf.name] = cf.def
			}
		}
	}
	return out, ""
}

// validateCF is CustomField.validate; it returns NetBox's message, or "" when value is valid.
func (e *Emulator) validateCF(cf *customField, value any) string {
	if value == nil || value == "" {
		if cf.required {
			return "Required field cannot be empty."
		}
		return ""
	}
	switch cf.typ {
	case "text", "longtext", "url":
		s, ok := value.(string)
		if !ok {
			return "Value must be a string."
		}
		if cf.validationRegex != "" {
			re, err := regexp.Compile(cf.validationRegex)
			if err != nil || !matchAtStart(re, s) {
				return fmt.Sprintf("Value must match regex '%s'", cf.validationRegex)
			}
		}
	case "integer":
		if n, ok := value.(json.Number); !ok || strings.ContainsAny(string(n), ".eE") {
			return "Value must be an integer."
		}
	case "decimal":
		if _, ok := value.(json.Number); !ok {
			return "Value must be a decimal."
		}
	case "boolean":
		if _, ok := value.(bool); !ok && !(isNumber(value) && (num(value) == 0 || num(value) == 1)) {
			return "Value must be true or false."
		}
	case "date":
		s, ok := value.(string)
		if _, err := time.Parse(time.DateOnly, s); !ok || err != nil {
			return "Date values must be in ISO 8601 format (YYYY-MM-DD)."
		}
	case "datetime":
		s, ok := value.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			return "Date and time values must be in ISO 8601 format (YYYY-MM-DD HH:MM:SS)."
		}
	case "select":
		s, ok := value.(string)
		if !ok || !slices.Contains(e.choiceValues(cf), s) {
			return fmt.Sprintf("Invalid choice (%s) for choice set %s.", pyStr(value), e.db.choiceSets[cf.choiceSet].name)
		}
	case "multiselect":
		list, ok := value.([]any)
		for _, item := range list {
			s, isStr := item.(string)
			ok = ok && isStr && slices.Contains(e.choiceValues(cf), s)
		}
		if !ok {
			return fmt.Sprintf("Invalid choice(s) (%s) for choice set %s.", pyStr(value), e.db.choiceSets[cf.choiceSet].name)
		}
	}
	return ""
}

func (e *Emulator) choiceValues(cf *customField) []string {
	cs, ok := e.db.choiceSets[cf.choiceSet]
	if !ok {
		return nil
	}
	out := make([]string, len(cs.choices))
	for i, c := range cs.choices {
		out[i] = c[0]
	}
	return out
}

// pyStr formats a decoded JSON value as Python's str() would (for NetBox's messages).
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return x
	case json.Number:
		return string(encodePython(x))
	case []any:
		parts := make([]string, len(x))
		for i, item := range x {
			parts[i] = pyRepr(item)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + pyRepr(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

func pyRepr(v any) string {
	if s, ok := v.(string); ok {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
	}
	return pyStr(v)
}

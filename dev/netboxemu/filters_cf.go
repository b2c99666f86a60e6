package netboxemu

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Custom-field filters, cf_<name>[__lookup], as NetBoxModelFilterSet builds them from each
// field's CustomField.to_filter() (NB@v4.6.8:netbox/extras/models/customfields.py) and
// BaseFilterSet.get_additional_lookups:
//   - text, long text, URL: filter_logic loose is icontains and has no lookups (icontains is not
//     one of the STANDARD_LOOKUPS that lookups are added to); exact is exact with the char lookups;
//   - selection: exact with the char lookups; multiple selection: contains;
//   - integer, decimal, date, date & time: exact with the numeric lookups (empty is JSON empty);
//   - boolean: exact, no lookups; JSON, object fields: no filter; filter_logic disabled: no filter.
// Every filter but the boolean is missing-key aware (extras/filters.py): a field that was never
// set or is null counts as unset, "null" selects the unset objects, and a negated lookup admits them.

// cfFilter is the filter of one custom field.
type cfFilter struct {
	cf      *customField
	base    string            // the Django lookup of cf_<name>
	lookups map[string]string // suffix → Django lookup
	number  bool              // integer or decimal
}

func (e *Emulator) cfFilterOf(cf *customField) (*cfFilter, string) {
	f := &cfFilter{cf: cf, base: "exact"}
	switch cf.typ {
	case "text", "longtext", "url":
		if cf.filterLogic == "loose" {
			f.base = "icontains"
		} else {
			f.lookups = charLookups
		}
	case "select":
		f.lookups = charLookups
	case "multiselect":
		f.base = "contains"
		f.lookups = map[string]string{"n": "contains", "empty": "empty"}
	case "integer", "decimal", "date", "datetime":
		f.lookups, f.number = numericLookups, cf.typ == "integer" || cf.typ == "decimal"
	case "boolean":
	default:
		return nil, "NetBox 4.6.8 has no filter for " + cf.typ + " custom fields and would ignore the parameter."
	}
	return f, ""
}

// compileCF builds the row filter of a cf_ parameter.
func (e *Emulator) compileCF(res *resource, param string, values []string) (rowFilter, *filterError) {
	name, lookup := strings.TrimPrefix(param, "cf_"), ""
	cf := e.cfNamed(res.objectType, name)
	if cf == nil {
		if n, l, ok := cutLast(name, "__"); ok {
			name, lookup, cf = n, l, e.cfNamed(res.objectType, n)
		}
	}
	if cf == nil {
		return nil, notImplemented(param, res.path, fmt.Sprintf("no custom field %q exists for %s (NetBox ignores the parameter).", name, res.objectType))
	}
	if cf.filterLogic == "disabled" {
		return nil, notImplemented(param, res.path, "the custom field's filter_logic is disabled, so NetBox ignores the parameter.")
	}
	f, why := e.cfFilterOf(cf)
	if f == nil {
		return nil, notImplemented(param, res.path, why)
	}
	django := f.base
	if lookup != "" {
		var ok bool
		if django, ok = f.lookups[lookup]; !ok {
			return nil, notImplemented(param, res.path, fmt.Sprintf("NetBox 4.6.8 has no lookup __%s on a %s custom field (filter_logic %s) and would ignore the parameter.", lookup, cf.typ, cf.filterLogic))
		}
	}
	values = nonEmpty(values, cf.typ == "boolean" || django == "empty" || django == "isnull")
	if len(values) == 0 {
		return nil, nil
	}
	m, err := f.matcher(param, django, values, e)
	if err != nil {
		return nil, err
	}
	negate := strings.HasPrefix(lookup, "n")
	return func(id int) bool {
		v, set := res.cf(id)[cf.name]
		hit := m(v, set && v != nil)
		if negate {
			return !hit
		}
		return hit
	}, nil
}

func (e *Emulator) cfNamed(objectType, name string) *customField {
	for _, cf := range e.db.cfsFor(objectType) {
		if cf.name == name {
			return cf
		}
	}
	return nil
}

// matcher tests a row's stored value (set false: the key is absent or null).
func (f *cfFilter) matcher(param, django string, values []string, e *Emulator) (func(v any, set bool) bool, *filterError) {
	if django == "empty" || django == "isnull" {
		want, err := parseBool(param, values[0])
		if err != nil {
			return nil, err
		}
		return func(v any, set bool) bool { return (!set || v == "") == want }, nil
	}
	if f.cf.typ == "boolean" {
		b, err := parseBool(param, values[0])
		if err != nil {
			return nil, err
		}
		return func(v any, set bool) bool { return set && v == b }, nil
	}
	wantUnset := slices.Contains(values, nullValue)
	values = slices.DeleteFunc(slices.Clone(values), func(s string) bool { return s == nullValue })
	one, err := f.valueMatcher(param, django, values)
	if err != nil {
		return nil, err
	}
	return func(v any, set bool) bool {
		if !set {
			return wantUnset
		}
		return one(v)
	}, nil
}

func (f *cfFilter) valueMatcher(param, django string, values []string) (func(any) bool, *filterError) {
	switch {
	case f.number:
		nums := make([]float64, 0, len(values))
		for _, v := range values {
			n, err := json.Number(strings.TrimSpace(v)).Float64()
			if err != nil || (f.cf.typ == "integer" && strings.ContainsAny(v, ".eE")) {
				msg := "Enter a number."
				if f.cf.typ == "integer" {
					msg = "Enter a whole number."
				}
				return nil, &filterError{param, msg}
			}
			nums = append(nums, n)
		}
		return func(v any) bool {
			if !isNumber(v) {
				return false
			}
			x := num(v)
			return compareAny(nums, django, func(w float64) int { return cmpFloat(x, w) })
		}, nil
	case f.cf.typ == "date" || f.cf.typ == "datetime":
		ts, err := parseTimes(param, values)
		if err != nil {
			return nil, err
		}
		wanted := make([]string, len(ts))
		for i, t := range ts {
			wanted[i] = cfTimeText(f.cf.typ, t)
		}
		return func(v any) bool {
			s, ok := v.(string)
			return ok && compareAny(wanted, django, func(w string) int { return strings.Compare(s, w) })
		}, nil
	case django == "contains": // multiple selection: the list holds the value
		return func(v any) bool {
			list, _ := v.([]any)
			return slices.ContainsFunc(list, func(item any) bool { return slices.Contains(values, fmt.Sprint(item)) })
		}, nil
	case django == "exact": // JSON equality: only a string equals a string value
		return func(v any) bool { s, ok := v.(string); return ok && slices.Contains(values, s) }, nil
	}
	return textMatcher(param, django, values, false)
}

// cfTimeText is the JSON text Django compares a date or datetime custom field with (its value
// encoded by DjangoJSONEncoder), so that comparisons are PostgreSQL's jsonb string order.
func cfTimeText(typ string, t time.Time) string {
	if typ == "date" {
		return t.Format(time.DateOnly)
	}
	return djangoTime(t)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

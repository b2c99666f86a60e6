package netboxemu

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Filtering as NetBox 4.6.8's filter sets do it (NB@v4.6.8:netbox/netbox/filtersets.py
// BaseFilterSet.get_additional_lookups, utilities/constants.py FILTER_*_LOOKUP_MAP,
// utilities/filters.py, extras/filters.py MissingKeyAwareFilterMixin; NetBox's Filtering docs).
// A filter is a declared name with a kind; the kind decides which lookups (`name__ic`, …) exist.
// Several values of one filter are OR'ed, several filters are AND'ed. A parameter the emulator
// does not know is refused with a 400 naming it, where NetBox would silently ignore it: an
// unknown filter must never widen a selection (README.md, "Deliberate divergences").

type fkind int

const (
	fChar   fkind = iota // MultiValueCharFilter over a text field: the char lookups
	fChoice              // MultipleChoiceFilter with choices: the char lookups, values must be choices
	fNumber              // MultiValueNumberFilter (or NumberFilter): the numeric lookups
	fTime                // MultiValueDateTimeFilter: the numeric lookups over datetimes
	fBool                // BooleanFilter: no lookups
	fRef                 // ModelMultipleChoiceFilter: only __n; each value must name an existing object
	fMAC                 // MultiValueMACAddressFilter: the char lookups over the MAC's text
	fType                // MultiValueContentTypeFilter ("app.model"): no lookups the emulator serves
	fMethod              // a filter with method=: no lookups, its own semantics (match)
	fRange               // DateTimeFromToRangeFilter: NAME_after and NAME_before, inclusive
)

// lookups maps a lookup suffix to its Django lookup, per filter kind (utilities/constants.py).
var charLookups = map[string]string{"n": "exact", "ic": "icontains", "nic": "icontains", "iew": "iendswith",
	"niew": "iendswith", "isw": "istartswith", "nisw": "istartswith", "ie": "iexact", "nie": "iexact",
	"empty": "empty", "regex": "regex", "iregex": "iregex"}

var numericLookups = map[string]string{"n": "exact", "lte": "lte", "lt": "lt", "gte": "gte", "gt": "gt", "empty": "isnull"}

var refLookups = map[string]string{"n": "exact"}

func (k fkind) lookups() map[string]string {
	switch k {
	case fChar, fChoice, fMAC:
		return charLookups
	case fNumber, fTime:
		return numericLookups
	case fRef:
		return refLookups
	}
	return nil
}

// filterDef is one declared filter of a model's filter set.
type filterDef struct {
	name   string
	kind   fkind
	base   string // the declared lookup of char filters: "exact" (default), "iexact" or "icontains"
	single bool   // a single-valued filter (NumberFilter, ChoiceFilter, BooleanFilter): the last value counts
	// value is the row's value: string, int, bool, time.Time, nil (null), or []any when the row
	// has several (a device's MACs); a filter matches a row when any of them matches.
	value   func(id int) any
	choices func() []string                // fChoice: the valid values
	exists  func(v string) bool            // fRef: whether the value names an object (by id or slug)
	match   func(id int, vs []string) bool // fMethod
	noNull  bool                           // null_value=None: "null" is a value like any other
}

// rowFilter keeps or drops one row.
type rowFilter func(id int) bool

// filterError is a 400 keyed by the parameter, in django-filter's shape ({"param": ["msg"]}).
type filterError struct{ param, msg string }

func (e *filterError) Error() string { return e.param + ": " + e.msg }

// notImplemented is the emulator's refusal of a parameter NetBox would take or ignore.
func notImplemented(param, path, why string) *filterError {
	return &filterError{param, fmt.Sprintf("The NetBox emulator does not implement the filter %q on /api/%s/%s; it refuses it rather than return an unfiltered list (see dev/netboxemu/README.md).", param, path, why)}
}

// outputParams are the list parameters that are not filters (paging, ordering, output).
var outputParams = []string{"limit", "offset", "start", "ordering", "brief", "fields", "omit", "exclude", "format"}

// compileFilters turns a list request's query into row filters, or the 400 to answer.
func (e *Emulator) compileFilters(res *resource, q url.Values) ([]rowFilter, *filterError) {
	defs := map[string]*filterDef{}
	for i := range res.filters {
		defs[res.filters[i].name] = &res.filters[i]
	}
	var out []rowFilter
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first refusal is the same on every run
	for _, param := range keys {
		values := q[param]
		if slices.Contains(outputParams, param) {
			continue
		}
		f, err := e.compileParam(res, defs, param, values)
		if err != nil {
			return nil, err
		}
		if f != nil {
			out = append(out, f)
		}
	}
	return out, nil
}

func (e *Emulator) compileParam(res *resource, defs map[string]*filterDef, param string, values []string) (rowFilter, *filterError) {
	if param == "q" {
		return searchFilter(res, values), nil
	}
	if strings.HasPrefix(param, "cf_") && res.cf != nil {
		return e.compileCF(res, param, values)
	}
	if d, ok := defs[param]; ok {
		if d.kind == fRange {
			return nil, notImplemented(param, res.path, "it is a date range: NetBox reads only "+param+"_after and "+param+"_before and would ignore it.")
		}
		return d.compile(param, "", values)
	}
	for _, d := range res.filters {
		if d.kind == fRange && (param == d.name+"_after" || param == d.name+"_before") {
			return d.compileRange(param, values)
		}
	}
	if name, lookup, ok := cutLast(param, "__"); ok {
		if d, known := defs[name]; known {
			if _, has := d.kind.lookups()[lookup]; has && d.base != "icontains" {
				return d.compile(param, lookup, values)
			}
			return nil, notImplemented(param, res.path, "the emulator serves no lookup __"+lookup+" on this filter (NetBox 4.6.8 has none, or ignores it here).")
		}
	}
	return nil, notImplemented(param, res.path, "it is not a filter of this endpoint that the emulator serves (NetBox ignores parameters it does not know).")
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i <= 0 {
		return "", "", false
	}
	return s[:i], s[i+len(sep):], true
}

// searchFilter is the filter set's search(): q, stripped empty, matches nothing extra.
func searchFilter(res *resource, values []string) rowFilter {
	v := values[len(values)-1] // a CharFilter takes the last value
	if strings.TrimSpace(v) == "" || res.search == nil {
		return nil
	}
	return func(id int) bool { return res.search(id, v) }
}

// nonEmpty drops empty values (multivalue_field_factory: "Only append non-empty values").
func nonEmpty(values []string, single bool) []string {
	if single {
		values = values[len(values)-1:]
	}
	var out []string
	for _, v := range values {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// compile builds the row filter of one parameter: the declared filter with lookup ("" for the
// declared one).
func (d *filterDef) compile(param, lookup string, values []string) (rowFilter, *filterError) {
	values = nonEmpty(values, d.single || d.kind == fBool || lookup == "empty")
	if len(values) == 0 {
		return nil, nil // django-filter skips a filter without values
	}
	negate := strings.HasPrefix(lookup, "n") && lookup != ""
	django := d.base
	if django == "" {
		django = "exact"
	}
	if lookup != "" {
		django = d.kind.lookups()[lookup]
	}
	var m func(row any) bool
	var err *filterError
	switch {
	case django == "empty" || django == "isnull":
		m, err = emptyMatcher(param, values[0])
	case d.kind == fMethod:
		return func(id int) bool { return d.match(id, values) }, nil
	default:
		m, err = d.matcher(param, django, values)
	}
	if err != nil {
		return nil, err
	}
	return func(id int) bool {
		v := d.value(id)
		hit := anyOf(v, m)
		if negate {
			return !hit
		}
		return hit
	}, nil
}

// anyOf applies m to a row's value, or to each of its values.
func anyOf(v any, m func(any) bool) bool {
	if list, ok := v.([]any); ok {
		if len(list) == 0 {
			return m(nil)
		}
		for _, item := range list {
			if m(item) {
				return true
			}
		}
		return false
	}
	return m(v)
}

// emptyMatcher is the `empty` lookup (a BooleanFilter): true matches null and "", false the rest.
func emptyMatcher(param, raw string) (func(any) bool, *filterError) {
	want, err := parseBool(param, raw)
	if err != nil {
		return nil, err
	}
	return func(v any) bool { return isEmpty(v) == want }, nil
}

func isEmpty(v any) bool {
	return v == nil || v == ""
}

// parseBool reads a BooleanFilter value as Django's NullBooleanSelect does. NetBox ignores
// any other value (the filter is skipped); the emulator refuses it.
func parseBool(param, raw string) (bool, *filterError) {
	switch raw {
	case "true", "True":
		return true, nil
	case "false", "False":
		return false, nil
	}
	return false, &filterError{param, fmt.Sprintf("The NetBox emulator refuses %q: a boolean filter takes true or false (NetBox would ignore the value and not filter).", raw)}
}

func parseInts(param string, values []string) ([]int, *filterError) {
	out := make([]int, 0, len(values))
	for _, v := range values {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, &filterError{param, "Enter a whole number."}
		}
		out = append(out, n)
	}
	return out, nil
}

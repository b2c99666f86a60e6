package netboxemu

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Matching one row value against a filter's values, per kind and Django lookup. The null
// sentinel "null" (django-filter's NULL_CHOICE_VALUE) matches a null value.

const nullValue = "null"

// matcher returns the test of one value against the filter's values (OR'ed).
func (d *filterDef) matcher(param, django string, values []string) (func(any) bool, *filterError) {
	wantNull := false
	if !d.noNull && (django == "exact" || django == "iexact") && d.kind != fChoice {
		if i := slices.Index(values, nullValue); i >= 0 {
			wantNull = true
			values = slices.Delete(slices.Clone(values), i, i+1)
		}
	}
	var one func(any) bool
	var err *filterError
	switch d.kind {
	case fChar, fMAC:
		one, err = textMatcher(param, django, values, d.kind == fMAC)
	case fChoice:
		for _, v := range values {
			if !slices.Contains(d.choices(), v) {
				return nil, &filterError{param, fmt.Sprintf("Select a valid choice. %s is not one of the available choices.", v)}
			}
		}
		one, err = textMatcher(param, django, values, false)
	case fNumber:
		var ns []int
		if ns, err = parseInts(param, values); err == nil {
			one = func(v any) bool {
				n, ok := v.(int)
				return ok && compareAny(ns, django, func(x int) int { return n - x })
			}
		}
	case fTime:
		var ts []time.Time
		if ts, err = parseTimes(param, values); err == nil {
			one = func(v any) bool {
				t, ok := v.(time.Time)
				return ok && compareAny(ts, django, func(x time.Time) int { return t.Compare(x) })
			}
		}
	case fBool:
		var b bool
		if b, err = parseBool(param, values[0]); err == nil {
			one = func(v any) bool { return v == b }
		}
	case fRef:
		one, err = d.refMatcher(param, values)
	case fType:
		one = typeMatcher(values)
	}
	if err != nil {
		return nil, err
	}
	return func(v any) bool {
		if v == nil {
			return wantNull
		}
		return one(v)
	}, nil
}

// compareAny applies a comparison lookup (exact, lt, lte, gt, gte) against each wanted value;
// cmp(x) is the row value compared with x (<0, 0, >0).
func compareAny[T any](wanted []T, django string, cmp func(T) int) bool {
	for _, w := range wanted {
		c := cmp(w)
		if (django == "exact" && c == 0) || (django == "lt" && c < 0) || (django == "lte" && c <= 0) ||
			(django == "gt" && c > 0) || (django == "gte" && c >= 0) {
			return true
		}
	}
	return false
}

// textMatcher is Django's text lookups as PostgreSQL runs them: iexact and the i* pattern
// lookups compare UPPER() of both sides; regex is POSIX `~` (case-sensitive), iregex `~*`.
// Regular expressions are compiled as Go RE2 (the common subset behaves the same). MACs compare
// by their canonical form for exact and as PostgreSQL's macaddr text (lowercase) otherwise.
func textMatcher(param, django string, values []string, mac bool) (func(any) bool, *filterError) {
	var res []*regexp.Regexp
	for _, v := range values {
		if django == "regex" || django == "iregex" {
			src := v
			if django == "iregex" {
				src = "(?i)" + v
			}
			re, err := regexp.Compile(src)
			if err != nil {
				return nil, &filterError{param, "The NetBox emulator cannot compile this regular expression: " + err.Error()}
			}
			res = append(res, re)
		}
	}
	if mac && django == "exact" {
		var canon []string
		for _, v := range values {
			if c, ok := canonicalMAC(v); ok {
				canon = append(canon, c)
			}
		}
		values = canon // an invalid MAC matches nothing (MultiValueMACAddressFilter: qs.none())
	}
	return func(v any) bool {
		s := jsonText(v)
		if mac && django != "exact" {
			s = strings.ToLower(s)
		}
		for i, w := range values {
			if textLookup(django, s, w, res, i) {
				return true
			}
		}
		return false
	}, nil
}

func textLookup(django, s, w string, res []*regexp.Regexp, i int) bool {
	S, W := strings.ToUpper(s), strings.ToUpper(w)
	switch django {
	case "exact":
		return s == w
	case "iexact":
		return S == W
	case "icontains":
		return strings.Contains(S, W)
	case "istartswith":
		return strings.HasPrefix(S, W)
	case "iendswith":
		return strings.HasSuffix(S, W)
	case "regex", "iregex":
		return res[i].MatchString(s)
	}
	return false
}

// jsonText is a value as PostgreSQL's ->> gives it: a string as is, anything else as JSON.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return string(encodeREST(v))
}

// refMatcher matches a related object by its key (id or slug), after checking that every
// value names an object (ModelMultipleChoiceField: 400 otherwise).
func (d *filterDef) refMatcher(param string, values []string) (func(any) bool, *filterError) {
	for _, v := range values {
		if !d.exists(v) {
			return nil, &filterError{param, fmt.Sprintf("Select a valid choice. %s is not one of the available choices.", v)}
		}
	}
	ids := map[int]bool{} // the values that are ids, so that an id row compares without formatting
	for _, v := range values {
		if n, err := strconv.Atoi(v); err == nil {
			ids[n] = true
		}
	}
	return func(v any) bool {
		if n, ok := v.(int); ok {
			return ids[n]
		}
		return slices.Contains(values, fmt.Sprint(v))
	}, nil
}

// typeMatcher is MultiValueContentTypeFilter: "app.model", case-insensitive; malformed values
// are skipped, so only malformed values match nothing.
func typeMatcher(values []string) func(any) bool {
	var want []string
	for _, v := range values {
		if a, m, ok := strings.Cut(strings.ToLower(v), "."); ok && a != "" && m != "" && !strings.Contains(m, ".") {
			want = append(want, a+"."+m)
		}
	}
	return func(v any) bool { return slices.Contains(want, fmt.Sprint(v)) }
}

// compileRange is DateTimeFromToRangeFilter: NAME_after is >=, NAME_before is <=.
func (d *filterDef) compileRange(param string, values []string) (rowFilter, *filterError) {
	values = nonEmpty(values, true)
	if len(values) == 0 {
		return nil, nil
	}
	ts, err := parseTimes(param, values)
	if err != nil {
		return nil, err
	}
	after := strings.HasSuffix(param, "_after")
	return func(id int) bool {
		t, ok := d.value(id).(time.Time)
		if !ok {
			return false
		}
		if after {
			return !t.Before(ts[0])
		}
		return !t.After(ts[0])
	}, nil
}

// parseTimes reads datetimes as Django's forms.DateTimeField does (ISO 8601 with a space or T,
// with or without seconds, fraction and offset; a bare date is midnight); naive times are UTC
// (TIME_ZONE).
func parseTimes(param string, values []string) ([]time.Time, *filterError) {
	layouts := []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04",
		"2006-01-02T15:04Z07:00", time.DateOnly}
	out := make([]time.Time, 0, len(values))
	for _, v := range values {
		s := strings.Replace(strings.TrimSpace(v), " ", "T", 1)
		var t time.Time
		var err error
		for _, l := range layouts {
			if t, err = time.Parse(l, s); err == nil {
				break
			}
		}
		if err != nil {
			return nil, &filterError{param, "Enter a valid date/time."}
		}
		out = append(out, t.UTC())
	}
	return out, nil
}

package netboxemu

import (
	"encoding/json"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// Python's view of the emulator's JSON values (nil, bool, string, int, int64, float64,
// json.Number, obj, map[string]any, []any, []string): NetBox compares, tests and prints them as
// Python objects, in conditions, custom-field validation and filters.

func pyIn(needle any, list []any) bool {
	for _, item := range list {
		if pyEq(item, needle) {
			return true
		}
	}
	return false
}

// pyEq is Python's == over JSON values.
func pyEq(a, b any) bool {
	if x, ok := pyNumber(a); ok {
		y, ok := pyNumber(b)
		return ok && x.cmp(y) == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	}
	if x, ok := pyList(a); ok {
		y, ok := pyList(b)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEq(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if x, ok := pyDict(a); ok {
		y, ok := pyDict(b)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, va := range x {
			vb, ok := y[k]
			if !ok || !pyEq(va, vb) {
				return false
			}
		}
		return true
	}
	return false
}

// number is a Python int (exact, booleans included) or float. Python compares an int with a
// float exactly, not by converting the int to a float.
type number struct {
	i *big.Int // nil for a float
	f float64
}

func pyNumber(v any) (number, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return number{i: big.NewInt(1)}, true
		}
		return number{i: big.NewInt(0)}, true
	case int:
		return number{i: big.NewInt(int64(x))}, true
	case int64:
		return number{i: big.NewInt(x)}, true
	case float64:
		return number{f: x}, true
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			f, _ := strconv.ParseFloat(string(x), 64) // out of range: ±Inf, as Python's float()
			return number{f: f}, true
		}
		i, ok := new(big.Int).SetString(string(x), 10)
		return number{i: i}, ok
	}
	return number{}, false
}

func (a number) cmp(b number) int {
	if a.i != nil && b.i != nil {
		return a.i.Cmp(b.i)
	}
	return a.big().Cmp(b.big())
}

func (a number) big() *big.Float {
	if a.i != nil {
		return new(big.Float).SetInt(a.i)
	}
	return new(big.Float).SetFloat64(a.f)
}

func pyList(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case []string:
		return toAny(x), true
	}
	return nil, false
}

func pyDict(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case obj:
		m := make(map[string]any, len(x))
		for _, f := range x {
			m[f.K] = f.V
		}
		return m, true
	}
	return nil, false
}

// truthy is Python's truth of a JSON value.
func truthy(v any) bool {
	if n, ok := pyNumber(v); ok {
		return n.cmp(number{i: new(big.Int)}) != 0
	}
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	}
	if l, ok := pyList(v); ok {
		return len(l) > 0
	}
	if d, ok := pyDict(v); ok {
		return len(d) > 0
	}
	return true
}

// pyClass is how Python prints a value's type: <class 'dict'>.
func pyClass(v any) string { return "<class '" + pyTypeName(v) + "'>" }

// isNumber is true for a value Python compares as a number (bool included).
func isNumber(v any) bool {
	_, ok := pyNumber(v)
	return ok
}

// num is a number's value as a float64 (a bool is 0 or 1), for filters and validation.
func num(v any) float64 {
	n, ok := pyNumber(v)
	if !ok {
		return 0
	}
	f, _ := n.big().Float64()
	return f
}

// matchAtStart is Python's re.match: a match that starts at the beginning of s.
func matchAtStart(re *regexp.Regexp, s string) bool {
	loc := re.FindStringIndex(s)
	return loc != nil && loc[0] == 0
}

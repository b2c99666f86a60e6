package netboxemu

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"

	"github.com/folly-infra/fleetd/netbox"
)

// Event-rule conditions, evaluated as NB@v4.6.8:netbox/extras/conditions.py does against the
// event's data (the REST representation of the object after the change). Python's semantics are
// kept where they show: short-circuiting and/or, == between numbers and booleans, "in" and
// "contains" on lists, strings and dicts, re.match anchored at the start. A path that cannot be
// resolved makes the rule false (InvalidCondition, logged by NetBox).

// errInvalid is NetBox's InvalidCondition: the whole rule evaluates false.
var errInvalid = errors.New("invalid condition")

// evalConditions reports whether data matches c; nil conditions always match.
func evalConditions(c *netbox.Conditions, data any) bool {
	if c == nil {
		return true
	}
	ok, err := evalNode(*c, data)
	return err == nil && ok
}

func evalNode(c netbox.Conditions, data any) (bool, error) {
	switch c.Logic {
	case netbox.LogicAnd:
		for _, r := range c.Rules {
			ok, err := evalNode(r, data)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case netbox.LogicOr:
		for _, r := range c.Rules {
			ok, err := evalNode(r, data)
			if err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	return evalLeaf(c.Leaf, data)
}

func evalLeaf(c netbox.Condition, data any) (bool, error) {
	v, err := resolve(data, c.Attr)
	if err != nil {
		return false, err
	}
	var ok bool
	switch c.Op {
	case "eq":
		ok = pyEq(v, c.Value)
	case "gt", "gte", "lt", "lte":
		if !isNumber(v) {
			return false, errInvalid // TypeError: '>' not supported
		}
		a, b := num(v), num(c.Value)
		ok = map[string]bool{"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[c.Op]
	case "in":
		ok = listContains(c.Value.([]any), v)
	case "contains":
		ok, err = pyContains(v, c.Value)
	case "regex":
		s, isStr := v.(string)
		re, reErr := regexp.Compile(c.Value.(string))
		if !isStr || reErr != nil {
			return false, errInvalid
		}
		ok = matchAtStart(re, s)
	}
	if err != nil {
		return false, err
	}
	return ok != c.Negate, nil
}

// resolve follows a dotted path; crossing a list maps the rest of the path over its items.
func resolve(data any, attr string) (any, error) {
	cur := data
	for _, key := range strings.Split(attr, ".") {
		if list, ok := cur.([]any); ok {
			out := make([]any, len(list))
			for i, item := range list {
				v, err := getItem(item, key)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
			cur = out
			continue
		}
		v, err := getItem(cur, key)
		if err != nil {
			return nil, err
		}
		cur = v
	}
	return cur, nil
}

// getItem is operator.getitem(obj or {}, key).
func getItem(v any, key string) (any, error) {
	if falsy(v) {
		return nil, errInvalid // KeyError on {}
	}
	switch x := v.(type) {
	case obj:
		if val, ok := x.get(key); ok {
			return val, nil
		}
	case map[string]any:
		if val, ok := x[key]; ok {
			return val, nil
		}
	}
	return nil, errInvalid // KeyError, or TypeError for a scalar (which NetBox does not catch)
}

// falsy is Python truthiness for decoded JSON.
func falsy(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case obj:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return isNumber(v) && num(v) == 0
}

func isNumber(v any) bool {
	switch v.(type) {
	case json.Number, int, int64, float64, bool:
		return true
	}
	return false
}

// num converts a number (or a bool, which Python treats as 0/1) to float64.
func num(v any) float64 {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	case bool:
		if x {
			return 1
		}
	}
	return 0
}

// pyEq is Python's == over decoded JSON values.
func pyEq(a, b any) bool {
	if isNumber(a) && isNumber(b) {
		return num(a) == num(b)
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEq(x[i], y[i]) {
				return false
			}
		}
		return true
	case obj, map[string]any:
		ma, mb := asMap(a), asMap(b)
		if mb == nil || len(ma) != len(mb) {
			return false
		}
		for k, va := range ma {
			vb, ok := mb[k]
			if !ok || !pyEq(va, vb) {
				return false
			}
		}
		return true
	}
	return false
}

func asMap(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return x
	case obj:
		m := make(map[string]any, len(x))
		for _, f := range x {
			m[f.K] = f.V
		}
		return m
	}
	return nil
}

func listContains(list []any, v any) bool {
	for _, item := range list {
		if pyEq(item, v) {
			return true
		}
	}
	return false
}

// pyContains is Python's `needle in haystack`.
func pyContains(haystack, needle any) (bool, error) {
	switch h := haystack.(type) {
	case string:
		s, ok := needle.(string)
		if !ok {
			return false, errInvalid // TypeError: 'in <string>' requires string
		}
		return strings.Contains(h, s), nil
	case []any:
		return listContains(h, needle), nil
	case obj, map[string]any:
		if _, isList := needle.([]any); isList {
			return false, errInvalid // TypeError: unhashable type
		}
		s, ok := needle.(string)
		if !ok {
			return false, nil
		}
		_, found := asMap(h)[s]
		return found, nil
	}
	return false, errInvalid // TypeError: argument is not iterable
}

// matchAtStart is Python's re.match: a match that starts at the beginning of s.
func matchAtStart(re *regexp.Regexp, s string) bool {
	loc := re.FindStringIndex(s)
	return loc != nil && loc[0] == 0
}

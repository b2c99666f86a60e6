package netboxemu

import (
	"fmt"
	"strings"
)

// Evaluating a rule's conditions against an event's data (the REST representation of the object
// after the change), as NB@v4.6.8:netbox/extras/conditions.py does, with Python's semantics:
//   - the dotted attr is followed with operator.getitem(obj or {}, key); crossing a list maps
//     the rest of the path over its items. A missing key, or a falsy value on the way (a null
//     primary_ip4), is a KeyError: InvalidCondition, and the whole rule is false (NetBox logs
//     "Evaluation failed"). A truthy non-dict on the way (a string, a number) is a TypeError
//     NetBox does not catch: the request that made the change is answered 500.
//   - a comparison the types do not allow (gt on a string, contains on a number, regex on a
//     number) is a TypeError NetBox turns into InvalidCondition: the rule is false, not negated.
//   - == is Python's: numbers and booleans compare by value (True == 1), containers element by
//     element; in and contains use it; regex is re.match, anchored at the start only.
//   - and/or stop at the first member that decides, so a failing member after it is not reached.

// invalidCondition is NetBox's InvalidCondition: the rule evaluates false.
type invalidCondition struct{ msg string }

func (e *invalidCondition) Error() string { return e.msg }

// match is EventRule.eval_conditions before its except: true when no conditions are set. The
// error is an *invalidCondition (the rule is false) or a *pyException (the request fails).
func (s *condSet) match(data any) (bool, error) {
	if s == nil {
		return true, nil
	}
	return s.eval(data)
}

func (s *condSet) eval(data any) (bool, error) {
	for _, m := range s.members {
		ok, err := m.eval(data)
		if err != nil {
			return false, err
		}
		if ok == s.any { // any: the first true decides; all: the first false
			return ok, nil
		}
	}
	return !s.any, nil
}

func (c *condition) eval(data any) (bool, error) {
	path, isStr := c.attr.(string)
	if !isStr {
		return false, &pyException{"AttributeError", fmt.Sprintf("'%s' object has no attribute 'split'", pyTypeName(c.attr))}
	}
	v, err := resolvePath(data, path)
	if err != nil {
		return false, err
	}
	ok, typeErr := c.compare(v)
	if typeErr != "" {
		return false, &invalidCondition{fmt.Sprintf("Invalid data type at '%s' for '%s' evaluation: %s", path, c.op, typeErr)}
	}
	return ok != c.negate, nil
}

// compare is Condition.eval_<op>; a non-empty second result is the TypeError's message.
func (c *condition) compare(v any) (bool, string) {
	switch c.op {
	case "eq":
		return pyEq(v, c.value), ""
	case "gt", "gte", "lt", "lte":
		a, ok := pyNumber(v)
		if !ok {
			sym := map[string]string{"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[c.op]
			return false, fmt.Sprintf("'%s' not supported between instances of '%s' and '%s'", sym, pyTypeName(v), pyTypeName(c.value))
		}
		b, _ := pyNumber(c.value)
		n := a.cmp(b)
		return map[string]bool{"gt": n > 0, "gte": n >= 0, "lt": n < 0, "lte": n <= 0}[c.op], ""
	case "in":
		return pyIn(v, c.value.([]any)), ""
	case "contains":
		return pyContains(v, c.value)
	case "regex":
		s, ok := v.(string)
		if !ok {
			return false, fmt.Sprintf("expected string or bytes-like object, got '%s'", pyTypeName(v))
		}
		return c.re.MatchString(s), ""
	}
	panic("netboxemu: condition with unchecked operator " + c.op)
}

// resolvePath is functools.reduce(_get, attr.split('.'), data).
func resolvePath(data any, path string) (any, error) {
	cur := data
	for _, key := range strings.Split(path, ".") {
		list, isList := pyList(cur)
		if !isList {
			v, err := getItem(cur, key, path)
			if err != nil {
				return nil, err
			}
			cur = v
			continue
		}
		out := make([]any, len(list))
		for i, item := range list {
			v, err := getItem(item, key, path)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		cur = out
	}
	return cur, nil
}

// getItem is operator.getitem(v or {}, key).
func getItem(v any, key, path string) (any, error) {
	if !truthy(v) {
		return nil, &invalidCondition{"Invalid key path: " + path}
	}
	var val any
	var found bool
	switch x := v.(type) {
	case obj:
		val, found = x.get(key)
	case map[string]any:
		val, found = x[key]
	default:
		msg := fmt.Sprintf("'%s' object is not subscriptable", pyTypeName(v))
		switch pyTypeName(v) {
		case "str":
			msg = "string indices must be integers, not 'str'"
		case "list":
			msg = "list indices must be integers or slices, not str"
		}
		return nil, &pyException{"TypeError", msg}
	}
	if !found {
		return nil, &invalidCondition{"Invalid key path: " + path}
	}
	return val, nil
}

// pyContains is `needle in haystack`; a non-empty second result is the TypeError's message.
func pyContains(haystack, needle any) (bool, string) {
	if s, ok := haystack.(string); ok {
		sub, ok := needle.(string)
		if !ok {
			return false, fmt.Sprintf("'in <string>' requires string as left operand, not %s", pyTypeName(needle))
		}
		return strings.Contains(s, sub), ""
	}
	if list, ok := pyList(haystack); ok {
		return pyIn(needle, list), ""
	}
	if keys, ok := pyDict(haystack); ok {
		if _, unhashable := needle.([]any); unhashable {
			return false, "unhashable type: 'list'"
		}
		k, isStr := needle.(string) // JSON keys are strings: a number or a bool is never one
		_, found := keys[k]
		return isStr && found, ""
	}
	return false, fmt.Sprintf("argument of type '%s' is not iterable", pyTypeName(haystack))
}

package netboxemu

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Event-rule conditions as NetBox 4.6.8 reads them (NB@v4.6.8:netbox/extras/conditions.py
// ConditionSet and Condition, netbox/extras/models/models.py EventRule.clean and
// eval_conditions; docs/reference/conditions.md). This is the emulator's own reading of
// NetBox's code, kept apart from fleetd's netbox.ParseConditions on purpose: fleetd checks its
// netbox-webhooks.yaml with that one, and the emulator must not share its mistakes.
//
// Saving a rule (EventRule.clean, run by the REST serializer's validate):
//   - conditions that are falsy in Python (null, {}, [], "", 0, false) are not checked, and
//     the rule then always fires (`if self.conditions`);
//   - anything else must be a dict: one key, "and" or "or" in any case, holding the members,
//     each a nested set (exactly one key, "and" or "or" in lower case) or a condition; or a
//     single condition, keys attr, value, op (default "eq") and negate (default false);
//   - a ValueError is a 400 {"conditions": [message]} with NetBox's message; an exception
//     clean does not catch is a 500: the upper-case {"AND": ...} (a KeyError: the key is
//     lowered and then looked up), and a nested member that is not a condition's keyword
//     arguments (a TypeError, only the top level turns it into "Incorrect key(s)").

// condNode is a member of a condition set: a nested set or a condition.
type condNode interface {
	eval(data any) (bool, error)
}

// condSet is NetBox's ConditionSet: all ("and", and a top-level single condition) or any
// ("or") of its members, evaluated in order and stopping at the first that decides.
type condSet struct {
	any     bool // "or"
	members []condNode
}

// condition is NetBox's Condition. attr is kept as stored: NetBox does not check its type on
// save, and evaluating a non-string path fails the request (AttributeError on .split).
type condition struct {
	attr   any
	value  any // nil, bool, string, json.Number or []any, as decoded from the rule's JSON
	op     string
	negate bool           // the truth of the stored negate (Python's `if self.negate`)
	re     *regexp.Regexp // op regex: the pattern anchored at the start, as re.match is
}

// conditionOps is Condition.OPERATORS; opsByType is Condition.TYPES (what each value type
// allows), keyed by the Python type name.
var (
	conditionOps = []string{"eq", "gt", "gte", "lt", "lte", "in", "contains", "regex"}
	opsByType    = map[string][]string{
		"str":      {"eq", "contains", "regex"},
		"bool":     {"eq", "contains"},
		"int":      {"eq", "gt", "gte", "lt", "lte", "contains"},
		"float":    {"eq", "gt", "gte", "lt", "lte", "contains"},
		"list":     {"eq", "in", "contains"},
		"NoneType": {"eq"},
	}
)

// pyException is a Python exception NetBox does not catch where it is raised: the request
// that raised it is answered 500.
type pyException struct {
	typ, msg string // e.g. "TypeError", "'int' object is not iterable"
}

func (e *pyException) Error() string { return e.typ + ": " + e.msg }

// ruleError is a ValueError EventRule.clean turns into a 400 on "conditions".
type ruleError struct{ msg string }

func (e *ruleError) Error() string { return e.msg }

// parseConditions is EventRule.clean's check of the stored conditions. nil, nil: no
// conditions, the rule always fires. The error is a *ruleError (400) or a *pyException (500).
func parseConditions(v any) (*condSet, error) {
	if !truthy(v) {
		return nil, nil
	}
	s, err := newConditionSet(v)
	if err != nil {
		return nil, err
	}
	return s, compileRegexes(s)
}

// newConditionSet is ConditionSet.__init__.
func newConditionSet(v any) (*condSet, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &ruleError{fmt.Sprintf("Ruleset must be a dictionary, not %s.", pyClass(v))}
	}
	if len(m) != 1 {
		c, err := newCondition(m)
		if _, kwargs := err.(*pyException); kwargs {
			return nil, &ruleError{"Incorrect key(s) informed. Please check documentation."}
		}
		if err != nil {
			return nil, err
		}
		return &condSet{members: []condNode{c}}, nil
	}
	var key string
	for k := range m {
		key = k
	}
	logic := strings.ToLower(key)
	if logic != "and" && logic != "or" {
		return nil, &ruleError{"Invalid logic type: must be 'AND' or 'OR'. Please check documentation."}
	}
	members, ok := m[logic]
	if !ok {
		return nil, &pyException{"KeyError", "'" + logic + "'"} // ruleset[self.logic] after .lower()
	}
	items, err := pyIter(members)
	if err != nil {
		return nil, err
	}
	s := &condSet{any: logic == "or"}
	for _, rule := range items {
		var n condNode
		if isRuleset(rule) {
			n, err = newConditionSet(rule)
		} else {
			n, err = newCondition(rule)
		}
		if err != nil {
			return nil, err
		}
		s.members = append(s.members, n)
	}
	return s, nil
}

// isRuleset is conditions.py's is_ruleset: a dict of exactly one key, "and" or "or".
func isRuleset(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	_, and := m["and"]
	_, or := m["or"]
	return and || or
}

// newCondition is Condition(**rule): Python binds the keyword arguments (a TypeError when rule
// is not a mapping, has another key or lacks attr or value), then __init__ checks op and the
// value's type.
func newCondition(rule any) (*condition, error) {
	m, ok := rule.(map[string]any)
	if !ok {
		return nil, &pyException{"TypeError", "Condition() argument after ** must be a mapping, not " + pyTypeName(rule)}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains([]string{"attr", "value", "op", "negate"}, k) {
			return nil, &pyException{"TypeError", fmt.Sprintf("Condition.__init__() got an unexpected keyword argument '%s'", k)}
		}
	}
	var missing []string
	for _, k := range []string{"attr", "value"} {
		if _, ok := m[k]; !ok {
			missing = append(missing, "'"+k+"'")
		}
	}
	if len(missing) > 0 {
		plural := map[bool]string{false: "argument", true: "arguments"}[len(missing) > 1]
		return nil, &pyException{"TypeError", fmt.Sprintf("Condition.__init__() missing %d required positional %s: %s",
			len(missing), plural, strings.Join(missing, " and "))}
	}
	c := &condition{attr: m["attr"], value: m["value"], op: "eq"}
	if op, given := m["op"]; given {
		s, isStr := op.(string)
		if !isStr || !slices.Contains(conditionOps, s) {
			return nil, &ruleError{fmt.Sprintf("Unknown operator: %s. Must be one of: %s", pyStr(op), strings.Join(conditionOps, ", "))}
		}
		c.op = s
	}
	allowed, known := opsByType[pyTypeName(c.value)]
	if !known {
		return nil, &ruleError{fmt.Sprintf("Unsupported value type: %s", pyClass(c.value))}
	}
	if !slices.Contains(allowed, c.op) {
		return nil, &ruleError{fmt.Sprintf("Invalid type for %s operation: %s", c.op, pyClass(c.value))}
	}
	c.negate = truthy(m["negate"])
	return c, nil
}

// compileRegexes compiles every regex condition's pattern. NetBox stores any pattern and
// compiles it with Python's re when an event is evaluated; the emulator has Go's RE2 only, so
// it refuses, on save, a pattern RE2 cannot compile (backreferences, lookarounds) instead of
// evaluating it otherwise than NetBox would (README.md, "Deliberate divergences").
func compileRegexes(s *condSet) error {
	for _, n := range s.members {
		var err error
		switch x := n.(type) {
		case *condSet:
			err = compileRegexes(x)
		case *condition:
			if x.op != "regex" {
				continue
			}
			pattern := x.value.(string) // the only type regex allows
			if _, err = regexp.Compile(pattern); err == nil {
				x.re, err = regexp.Compile(`\A(?:` + pattern + `)`)
			}
			if err != nil {
				err = &ruleError{fmt.Sprintf("The NetBox emulator matches regex conditions with Go's RE2, which cannot compile %q (%v); NetBox would store it and compile it with Python's re at each event.", pattern, err)}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pyIter is Python's iteration over the members of a set: a list's items, a string's
// characters, a dict's keys; anything else is not iterable.
func pyIter(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		var out []any
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return toAny(keys), nil
	}
	return nil, &pyException{"TypeError", fmt.Sprintf("'%s' object is not iterable", pyTypeName(v))}
}

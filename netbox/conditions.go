package netbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Conditions is one node of NetBox's event-rule condition language
// (NB@v4.6.8:netbox/extras/conditions.py; NetBox's Conditions docs): either a set, {"and": [...]}
// or {"or": [...]}, whose members are sets or leaves, or a single leaf {"attr", "value", "op",
// "negate"}.
type Conditions struct {
	Logic string       // LogicAnd or LogicOr for a set; "" for a leaf
	Rules []Conditions // the members of a set
	Leaf  Condition    // the leaf, when Logic is ""
}

// Set logics.
const (
	LogicAnd = "and"
	LogicOr  = "or"
)

// Condition is a leaf: the value at the dotted path Attr of the event's data compared with Value.
type Condition struct {
	Attr string
	// Value is nil, bool, string, json.Number or []any of those (JSON values as NetBox sees them).
	Value  any
	Op     string // one of Operators; "eq" when the rule omitted it
	Negate bool
}

// Operators are the comparison operators NetBox implements (regex is implemented but undocumented).
var Operators = []string{"eq", "gt", "gte", "lt", "lte", "in", "contains", "regex"}

// opsByType is NetBox's Condition.TYPES: which operators each value type allows.
var opsByType = map[string][]string{
	"str":      {"eq", "contains", "regex"},
	"bool":     {"eq", "contains"},
	"int":      {"eq", "gt", "gte", "lt", "lte", "contains"},
	"float":    {"eq", "gt", "gte", "lt", "lte", "contains"},
	"list":     {"eq", "in", "contains"},
	"NoneType": {"eq"},
}

// ConditionsError is why ParseConditions refuses a rule's conditions. NetBox refuses some of
// them itself when the rule is saved (a 400, or a server error from what EventRule.clean does
// not catch); it saves others but reads them otherwise than they look (Saved), and fleetd
// refuses those in its own file all the same.
type ConditionsError struct {
	Saved bool // NetBox would save the rule and act on this reading of it
	Msg   string
}

func (e *ConditionsError) Error() string { return e.Msg }

func refused(format string, a ...any) error {
	return &ConditionsError{Msg: fmt.Sprintf(format, a...)}
}

func misread(format string, a ...any) error {
	return &ConditionsError{Saved: true, Msg: fmt.Sprintf(format, a...)}
}

// ParseConditions decodes a rule's conditions JSON as NetBox reads it
// (NB@v4.6.8:netbox/extras/conditions.py ConditionSet and Condition, run by EventRule.clean
// when the rule is saved and by eval_conditions on every event), and refuses what NetBox
// refuses and what it would read otherwise than it looks; the *ConditionsError says which.
// JSON null or an empty object means no conditions: the result is nil and the rule always
// fires.
func ParseConditions(raw []byte) (*Conditions, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode conditions: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return nil, nil
	}
	if falsy(v) { // EventRule: `if not self.conditions: return True`
		return nil, misread("conditions %s: NetBox takes a false value for no conditions, so the rule would fire on every event; write null for that", raw)
	}
	c, err := parseNode(v, true)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// serverError ends the message of what NetBox does not catch when it checks a rule.
const serverError = "NetBox fails on it with a server error (500)"

func parseNode(v any, top bool) (Conditions, error) {
	m, ok := v.(map[string]any)
	if !ok {
		if top {
			return Conditions{}, refused("conditions must be an object, not %s (NetBox: \"Ruleset must be a dictionary\")", pyType(v))
		}
		return Conditions{}, refused("a condition must be an object, not %s: %s", pyType(v), serverError)
	}
	if len(m) == 1 {
		for k, members := range m {
			if k != LogicAnd && k != LogicOr {
				lower := strings.ToLower(k)
				switch {
				case top && (lower == LogicAnd || lower == LogicOr):
					return Conditions{}, refused("invalid logic type %q: NetBox lowers it and then does not find %q, and %s; write %q", k, lower, serverError, lower)
				case top:
					return Conditions{}, refused("invalid logic type %q: a one-key condition set is \"and\" or \"or\"", k)
				}
				break // a nested one-key dict is a condition (and fails for lack of value)
			}
			list, ok := members.([]any)
			if !ok {
				if set, isMap := members.(map[string]any); members == "" || isMap && len(set) == 0 {
					return Conditions{}, misread("%q must hold a list of conditions, not %s: NetBox takes an empty one for a set of no conditions", k, pyType(members))
				}
				return Conditions{}, refused("%q must hold a list of conditions, not %s: %s", k, pyType(members), serverError)
			}
			set := Conditions{Logic: k}
			for i, member := range list {
				c, err := parseNode(member, false)
				if err != nil {
					var ce *ConditionsError
					if errors.As(err, &ce) {
						return Conditions{}, &ConditionsError{Saved: ce.Saved, Msg: fmt.Sprintf("%s[%d]: %s", k, i, ce.Msg)}
					}
					return Conditions{}, err
				}
				set.Rules = append(set.Rules, c)
			}
			return set, nil
		}
	}
	leaf, err := parseLeaf(m, top)
	if err != nil {
		return Conditions{}, err
	}
	return Conditions{Leaf: leaf}, nil
}

// parseLeaf reads a condition, its keys as Python binds Condition(**rule) (a TypeError, which
// NetBox turns into "Incorrect key(s)" at the top level only), then what Condition.__init__
// checks; what NetBox does not check comes last.
func parseLeaf(m map[string]any, top bool) (Condition, error) {
	where := "NetBox refuses it"
	if !top {
		where = serverError
	}
	for k := range m {
		switch k {
		case "attr", "value", "op", "negate":
		default:
			return Condition{}, refused("incorrect key %q in a condition: want attr, value, op, negate; %s", k, where)
		}
	}
	attrV, hasAttr := m["attr"]
	if !hasAttr {
		return Condition{}, refused("a condition needs \"attr\", a dotted path such as custom_fields.desired_action; %s", where)
	}
	attr, _ := attrV.(string)
	value, ok := m["value"]
	if !ok {
		return Condition{}, refused("condition on %v has no \"value\"; %s", attrV, where)
	}
	c := Condition{Attr: attr, Value: value, Op: "eq"}
	if op, ok := m["op"]; ok {
		s, isStr := op.(string)
		if !isStr || !slices.Contains(Operators, s) {
			return Condition{}, refused("unknown operator %v in the condition on %v: must be one of %s", op, attrV, strings.Join(Operators, ", "))
		}
		c.Op = s
	}
	t := pyType(value)
	allowed, ok := opsByType[t]
	if !ok {
		return Condition{}, refused("unsupported value type %s in the condition on %v", t, attrV)
	}
	if !slices.Contains(allowed, c.Op) {
		return Condition{}, refused("invalid type for %s operation: %s (condition on %v; %s allows %s)", c.Op, t, attrV, t, strings.Join(allowed, ", "))
	}
	if attr == "" {
		return Condition{}, misread("\"attr\" %s is not a dotted path such as custom_fields.desired_action: NetBox saves it, and then a path that is not a string fails every request the rule is evaluated on with a server error, and an empty one matches nothing", compact(attrV))
	}
	if neg, ok := m["negate"]; ok {
		b, isBool := neg.(bool)
		if !isBool {
			return Condition{}, misread("negate in the condition on %s is %s, not true or false: NetBox negates on any value that is true in Python (\"false\" included)", attr, compact(neg))
		}
		c.Negate = b
	}
	return c, nil
}

// falsy is Python's falsehood of a decoded JSON value.
func falsy(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// pyType names a decoded JSON value's type the way Python's json module would type it.
func pyType(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case string:
		return "str"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "float"
		}
		return "int"
	case float64:
		return "float"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// MarshalJSON writes the conditions back as NetBox's JSON (the form the REST API and the tofu
// provider's `conditions` take).
func (c Conditions) MarshalJSON() ([]byte, error) {
	return json.Marshal(c.tree())
}

func (c Conditions) tree() any {
	if c.Logic == "" {
		m := map[string]any{"attr": c.Leaf.Attr, "value": c.Leaf.Value, "op": c.Leaf.Op}
		if c.Leaf.Negate {
			m["negate"] = true
		}
		return m
	}
	rules := make([]any, len(c.Rules))
	for i, r := range c.Rules {
		rules[i] = r.tree()
	}
	return map[string]any{c.Logic: rules}
}

// Leaves lists every leaf of the tree, depth first.
func (c Conditions) Leaves() []Condition {
	if c.Logic == "" {
		return []Condition{c.Leaf}
	}
	var out []Condition
	for _, r := range c.Rules {
		out = append(out, r.Leaves()...)
	}
	return out
}

// String renders the conditions as compact JSON with sorted keys, for messages.
func (c Conditions) String() string {
	b, err := c.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

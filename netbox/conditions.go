package netbox

import (
	"bytes"
	"encoding/json"
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

// ParseConditions decodes a rule's conditions JSON and validates it the way NetBox's
// EventRule.clean does, so that a rule it accepts is one NetBox accepts. JSON null (or an empty
// object) means no conditions: the result is nil and the rule always fires.
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
	c, err := parseNode(v, true)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func parseNode(v any, top bool) (Conditions, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Conditions{}, fmt.Errorf("a condition must be an object, not %s", pyType(v))
	}
	if len(m) == 1 {
		for k, members := range m {
			if k != LogicAnd && k != LogicOr {
				if top {
					return Conditions{}, fmt.Errorf("invalid logic type %q: a single-key condition must be \"and\" or \"or\"", k)
				}
				break // a nested one-key dict is parsed as a leaf (and fails for lack of value)
			}
			list, ok := members.([]any)
			if !ok {
				return Conditions{}, fmt.Errorf("%q must hold a list of conditions, not %s", k, pyType(members))
			}
			set := Conditions{Logic: k}
			for i, member := range list {
				c, err := parseNode(member, false)
				if err != nil {
					return Conditions{}, fmt.Errorf("%s[%d]: %w", k, i, err)
				}
				set.Rules = append(set.Rules, c)
			}
			return set, nil
		}
	}
	leaf, err := parseLeaf(m)
	if err != nil {
		return Conditions{}, err
	}
	return Conditions{Leaf: leaf}, nil
}

func parseLeaf(m map[string]any) (Condition, error) {
	for k := range m {
		switch k {
		case "attr", "value", "op", "negate":
		default:
			return Condition{}, fmt.Errorf("incorrect key %q in a condition: want attr, value, op, negate", k)
		}
	}
	attr, ok := m["attr"].(string)
	if !ok || attr == "" {
		return Condition{}, fmt.Errorf("a condition needs \"attr\", a dotted path such as custom_fields.desired_action")
	}
	value, ok := m["value"]
	if !ok {
		return Condition{}, fmt.Errorf("condition on %s has no \"value\"", attr)
	}
	c := Condition{Attr: attr, Value: value, Op: "eq"}
	if op, ok := m["op"]; ok {
		s, isStr := op.(string)
		if !isStr || !slices.Contains(Operators, s) {
			return Condition{}, fmt.Errorf("unknown operator %v in the condition on %s: must be one of %s", op, attr, strings.Join(Operators, ", "))
		}
		c.Op = s
	}
	if neg, ok := m["negate"]; ok {
		b, isBool := neg.(bool)
		if !isBool {
			return Condition{}, fmt.Errorf("negate in the condition on %s must be true or false", attr)
		}
		c.Negate = b
	}
	t := pyType(value)
	allowed, ok := opsByType[t]
	if !ok {
		return Condition{}, fmt.Errorf("unsupported value type %s in the condition on %s", t, attr)
	}
	if !slices.Contains(allowed, c.Op) {
		return Condition{}, fmt.Errorf("invalid type for %s operation: %s (condition on %s; %s allows %s)", c.Op, t, attr, t, strings.Join(allowed, ", "))
	}
	return c, nil
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

package netboxemu

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
)

// outcome evaluates conditions as EventRule.eval_conditions would: "true" or "false", "invalid"
// (InvalidCondition: NetBox logs it and the rule is false) or "raise <Type>" (an exception
// NetBox does not catch: the request fails).
func outcome(t *testing.T, s *condSet, data any) string {
	t.Helper()
	ok, err := s.match(data)
	var invalid *invalidCondition
	var ex *pyException
	switch {
	case errors.As(err, &ex):
		return "raise " + ex.typ
	case errors.As(err, &invalid):
		return "invalid"
	case err != nil:
		t.Fatalf("match: unexpected error %T %v", err, err)
	}
	return strconv.FormatBool(ok)
}

func mustDecode(t *testing.T, s string) any {
	t.Helper()
	v, err := decodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

// TestConditionsNetBoxCases holds the emulator's reading to the cases NetBox's own tests state
// (NB@v4.6.8:netbox/extras/tests/test_conditions.py, ConditionTestCase and
// ConditionSetTestCase), each a condition, the data and what NetBox's test asserts.
func TestConditionsNetBoxCases(t *testing.T) {
	const (
		x1      = `{"attr": "x", "value": 1, "op": "eq"}`
		xyz1    = `{"attr": "x.y.z", "value": 1}`
		andAB   = `{"and": [{"attr": "a", "value": 1, "op": "eq"}, {"attr": "b", "value": 1, "op": "eq", "negate": true}]}`
		orAB    = `{"or": [{"attr": "a", "value": 1, "op": "eq"}, {"attr": "b", "value": 1, "op": "eq"}]}`
		andDeep = `{"and": [{"attr": "a", "value": 1, "op": "eq"}, {"and": [{"attr": "b", "value": 2, "op": "eq"}, {"attr": "c", "value": 3, "op": "eq"}]}]}`
		orDeep  = `{"or": [{"attr": "a", "value": 1, "op": "eq"}, {"or": [{"attr": "b", "value": 2, "op": "eq"}, {"attr": "c", "value": 3, "op": "eq"}]}]}`
		mixAnd  = `{"and": [{"attr": "a", "value": 1, "op": "eq"}, {"or": [{"attr": "b", "value": 2, "op": "eq"}, {"attr": "c", "value": 3, "op": "eq"}]}]}`
		mixOr   = `{"or": [{"attr": "a", "value": 1, "op": "eq"}, {"and": [{"attr": "b", "value": 2, "op": "eq"}, {"attr": "c", "value": 3, "op": "eq"}]}]}`
		notNull = `{"and": [{"attr": "a", "value": null, "op": "eq", "negate": true}]}`
		site    = `{"id": 1, "name": "Site 1", "slug": "site-1", "status": {"value": "active", "label": "Active"}}`
	)
	tests := []struct {
		name, cond, data, want string
	}{
		{"ok/undefined-attr-defined", x1, `{"x": 1}`, "true"},
		{"refuse/undefined-attr", x1, `{}`, "invalid"},
		{"ok/nested", xyz1, `{"x": {"y": {"z": 1}}}`, "true"},
		{"ok/nested-other-value", xyz1, `{"x": {"y": {"z": 2}}}`, "false"},
		{"refuse/nested-through-null", xyz1, `{"x": {"y": null}}`, "invalid"},
		{"refuse/nested-missing-key", xyz1, `{"x": {"y": {"a": 1}}}`, "invalid"},
		{"ok/default-operator-is-eq", `{"attr": "x", "value": 1}`, `{"x": 1}`, "true"},
		{"ok/eq", x1, `{"x": 1}`, "true"},
		{"ok/eq-other", x1, `{"x": 2}`, "false"},
		{"ok/eq-negated", `{"attr": "x", "value": 1, "op": "eq", "negate": true}`, `{"x": 1}`, "false"},
		{"ok/eq-negated-other", `{"attr": "x", "value": 1, "op": "eq", "negate": true}`, `{"x": 2}`, "true"},
		{"ok/gt", `{"attr": "x", "value": 1, "op": "gt"}`, `{"x": 2}`, "true"},
		{"ok/gt-equal", `{"attr": "x", "value": 1, "op": "gt"}`, `{"x": 1}`, "false"},
		{"refuse/gt-on-string", `{"attr": "x", "value": 1, "op": "gt"}`, `{"x": "foo"}`, "invalid"},
		{"ok/gte-more", `{"attr": "x", "value": 1, "op": "gte"}`, `{"x": 2}`, "true"},
		{"ok/gte-equal", `{"attr": "x", "value": 1, "op": "gte"}`, `{"x": 1}`, "true"},
		{"ok/gte-less", `{"attr": "x", "value": 1, "op": "gte"}`, `{"x": 0}`, "false"},
		{"refuse/gte-on-string", `{"attr": "x", "value": 1, "op": "gte"}`, `{"x": "foo"}`, "invalid"},
		{"ok/lt", `{"attr": "x", "value": 2, "op": "lt"}`, `{"x": 1}`, "true"},
		{"ok/lt-equal", `{"attr": "x", "value": 2, "op": "lt"}`, `{"x": 2}`, "false"},
		{"refuse/lt-on-string", `{"attr": "x", "value": 2, "op": "lt"}`, `{"x": "foo"}`, "invalid"},
		{"ok/lte-less", `{"attr": "x", "value": 2, "op": "lte"}`, `{"x": 1}`, "true"},
		{"ok/lte-equal", `{"attr": "x", "value": 2, "op": "lte"}`, `{"x": 2}`, "true"},
		{"ok/lte-more", `{"attr": "x", "value": 2, "op": "lte"}`, `{"x": 3}`, "false"},
		{"refuse/lte-on-string", `{"attr": "x", "value": 2, "op": "lte"}`, `{"x": "foo"}`, "invalid"},
		{"ok/in", `{"attr": "x", "value": [1, 2, 3], "op": "in"}`, `{"x": 1}`, "true"},
		{"ok/in-absent", `{"attr": "x", "value": [1, 2, 3], "op": "in"}`, `{"x": 9}`, "false"},
		{"ok/in-negated", `{"attr": "x", "value": [1, 2, 3], "op": "in", "negate": true}`, `{"x": 1}`, "false"},
		{"ok/in-negated-absent", `{"attr": "x", "value": [1, 2, 3], "op": "in", "negate": true}`, `{"x": 9}`, "true"},
		{"ok/contains", `{"attr": "x", "value": 1, "op": "contains"}`, `{"x": [1, 2, 3]}`, "true"},
		{"ok/contains-absent", `{"attr": "x", "value": 1, "op": "contains"}`, `{"x": [2, 3, 4]}`, "false"},
		{"refuse/contains-in-number", `{"attr": "x", "value": 1, "op": "contains"}`, `{"x": 123}`, "invalid"},
		{"ok/contains-negated", `{"attr": "x", "value": 1, "op": "contains", "negate": true}`, `{"x": [1, 2, 3]}`, "false"},
		{"ok/contains-negated-absent", `{"attr": "x", "value": 1, "op": "contains", "negate": true}`, `{"x": [2, 3, 4]}`, "true"},
		{"ok/regex", `{"attr": "x", "value": "[a-z]+", "op": "regex"}`, `{"x": "abc"}`, "true"},
		{"ok/regex-no-match", `{"attr": "x", "value": "[a-z]+", "op": "regex"}`, `{"x": "123"}`, "false"},
		{"ok/regex-negated", `{"attr": "x", "value": "[a-z]+", "op": "regex", "negate": true}`, `{"x": "abc"}`, "false"},
		{"ok/regex-negated-no-match", `{"attr": "x", "value": "[a-z]+", "op": "regex", "negate": true}`, `{"x": "123"}`, "true"},
		{"ok/null-value-negated-on-null", notNull, `{"a": null}`, "false"},
		{"ok/null-value-negated-on-string", notNull, `{"a": "string"}`, "true"},
		{"ok/null-value-negated-on-dict", notNull, `{"a": {"key": "value"}}`, "true"},
		{"ok/and-single-depth", andAB, `{"a": 1, "b": 2}`, "true"},
		{"ok/and-single-depth-false", andAB, `{"a": 1, "b": 1}`, "false"},
		{"ok/or-single-depth-a", orAB, `{"a": 1, "b": 2}`, "true"},
		{"ok/or-single-depth-b", orAB, `{"a": 2, "b": 1}`, "true"},
		{"ok/or-single-depth-false", orAB, `{"a": 2, "b": 2}`, "false"},
		{"ok/and-multi-depth", andDeep, `{"a": 1, "b": 2, "c": 3}`, "true"},
		{"ok/and-multi-depth-a", andDeep, `{"a": 9, "b": 2, "c": 3}`, "false"},
		{"ok/and-multi-depth-b", andDeep, `{"a": 1, "b": 9, "c": 3}`, "false"},
		{"ok/and-multi-depth-c", andDeep, `{"a": 1, "b": 2, "c": 9}`, "false"},
		{"ok/or-multi-depth-a", orDeep, `{"a": 1, "b": 9, "c": 9}`, "true"},
		{"ok/or-multi-depth-b", orDeep, `{"a": 9, "b": 2, "c": 9}`, "true"},
		{"ok/or-multi-depth-c", orDeep, `{"a": 9, "b": 9, "c": 3}`, "true"},
		{"ok/or-multi-depth-none", orDeep, `{"a": 9, "b": 9, "c": 9}`, "false"},
		{"ok/mixed-and-b", mixAnd, `{"a": 1, "b": 2, "c": 9}`, "true"},
		{"ok/mixed-and-c", mixAnd, `{"a": 1, "b": 9, "c": 3}`, "true"},
		{"ok/mixed-and-neither", mixAnd, `{"a": 1, "b": 9, "c": 9}`, "false"},
		{"ok/mixed-and-not-a", mixAnd, `{"a": 9, "b": 2, "c": 3}`, "false"},
		{"ok/mixed-or-a", mixOr, `{"a": 1, "b": 9, "c": 9}`, "true"},
		{"ok/mixed-or-bc", mixOr, `{"a": 9, "b": 2, "c": 3}`, "true"},
		{"ok/mixed-or-a-and-b", mixOr, `{"a": 1, "b": 2, "c": 9}`, "true"},
		{"ok/mixed-or-b-only", mixOr, `{"a": 9, "b": 2, "c": 9}`, "false"},
		{"ok/mixed-or-c-only", mixOr, `{"a": 9, "b": 9, "c": 3}`, "false"},
		{"ok/rule-without-logic-operator", `{"attr": "status.value", "value": "active"}`, site, "true"},
		{"ok/rule-without-logic-operator-in", `{"attr": "status.value", "value": ["planned", "staging"], "op": "in"}`, site, "false"},
		{"ok/rule-without-logic-operator-in-negated", `{"attr": "status.value", "value": ["planned", "staging"], "op": "in", "negate": true}`, site, "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseConditions(mustDecode(t, tt.cond))
			if err != nil {
				t.Fatalf("NetBox accepts %s; the emulator refused it: %v", tt.cond, err)
			}
			if got := outcome(t, s, mustDecode(t, tt.data)); got != tt.want {
				t.Errorf("%s on %s = %s, want %s", tt.cond, tt.data, got, tt.want)
			}
		})
	}
}

// condData is what a device update's conditions see: the REST data (status as value/label,
// select custom fields as raw strings, nested objects, lists).
var condData = obj{
	{"id", 12}, {"name", "node1"},
	{"status", obj{{"value", "active"}, {"label", "Active"}}},
	{"primary_ip4", nil},
	{"interface_count", 2},
	{"enabled", true},
	{"tags", []any{obj{{"slug", "gpu"}}, obj{{"slug", "lab"}}}},
	{"mixed", []any{obj{{"slug", "gpu"}}, "loose"}},
	{"empty", []any{}},
	{"big", json.Number("9007199254740993")},
	{"custom_fields", obj{{"desired_action", "provision"}, {"fleet_state", nil}, {"ek_sha256", "ab,cd"},
		{"weights", map[string]any{"a": json.Number("1")}}}},
}

// TestConditionsOnDeviceData evaluates conditions on a device's REST data with Python's
// semantics where NetBox's code shows them, and the examples of NetBox's conditions
// documentation (NB@v4.6.8:docs/reference/conditions.md).
func TestConditionsOnDeviceData(t *testing.T) {
	tests := []struct {
		name, cond, want string
	}{
		{"ok/docs-name-equals", `{"attr": "name", "value": "node1"}`, "true"},
		{"ok/docs-name-not-equal", `{"attr": "name", "value": "node1", "negate": true}`, "false"},
		{"ok/docs-greater-than", `{"attr": "id", "value": 10, "op": "gt"}`, "true"},
		{"ok/docs-status-not-in", `{"attr": "status.value", "value": ["planned", "staging"], "op": "in", "negate": true}`, "true"},
		{"ok/docs-condition-set", `{"or": [{"and": [{"attr": "status.value", "value": "active"}, {"attr": "primary_ip4", "value": null, "negate": true}]}, {"attr": "tags.slug", "value": "exempt", "op": "contains"}]}`, "false"},
		{"ok/docs-condition-set-tag", `{"or": [{"and": [{"attr": "status.value", "value": "active"}, {"attr": "primary_ip4", "value": null, "negate": true}]}, {"attr": "tags.slug", "value": "gpu", "op": "contains"}]}`, "true"},
		{"ok/select-field-raw-value", `{"attr": "custom_fields.desired_action", "value": ["provision", "attest", "wipe"], "op": "in"}`, "true"},
		{"ok/null-custom-field", `{"attr": "custom_fields.fleet_state", "value": null}`, "true"},
		{"ok/status-is-a-dict-not-its-value", `{"attr": "status", "value": "active"}`, "false"},
		{"ok/true-equals-one", `{"attr": "enabled", "value": 1}`, "true"},
		{"ok/int-equals-float", `{"attr": "interface_count", "value": 2.0}`, "true"},
		{"ok/int-compared-exactly-with-float", `{"attr": "big", "value": 9007199254740992.0, "op": "gt"}`, "true"},
		{"ok/lte-float", `{"attr": "interface_count", "value": 1.5, "op": "lte"}`, "false"},
		{"ok/contains-substring", `{"attr": "custom_fields.ek_sha256", "value": "b,c", "op": "contains"}`, "true"},
		{"ok/contains-dict-key", `{"attr": "custom_fields.weights", "value": "a", "op": "contains"}`, "true"},
		{"ok/contains-number-in-dict-is-no-key", `{"attr": "custom_fields.weights", "value": 1, "op": "contains"}`, "false"},
		{"ok/path-across-list", `{"attr": "tags.slug", "value": ["gpu", "lab"]}`, "true"},
		{"ok/path-across-empty-list", `{"attr": "empty.slug", "value": "gpu", "op": "contains"}`, "false"},
		{"ok/regex-anchored-at-start", `{"attr": "name", "value": "node\\d", "op": "regex"}`, "true"},
		{"ok/regex-is-match-not-search", `{"attr": "name", "value": "\\d", "op": "regex"}`, "false"},
		{"ok/regex-not-anchored-at-end", `{"attr": "name", "value": "no", "op": "regex"}`, "true"},
		{"ok/or-stops-before-missing-key", `{"or": [{"attr": "id", "value": 12}, {"attr": "nope", "value": 1}]}`, "true"},
		{"ok/and-stops-before-raise", `{"and": [{"attr": "id", "value": 1}, {"attr": "name.first", "value": "n"}]}`, "false"},
		{"ok/empty-and-is-true", `{"and": []}`, "true"},
		{"ok/empty-or-is-false", `{"or": []}`, "false"},
		{"ok/negate-is-python-truth", `{"attr": "name", "value": "node1", "negate": "false"}`, "false"},
		{"refuse/missing-key", `{"attr": "custom_fields.nope", "value": null}`, "invalid"},
		{"refuse/missing-key-negated-is-not-true", `{"attr": "custom_fields.nope", "value": "x", "negate": true}`, "invalid"},
		{"refuse/null-on-the-path", `{"attr": "primary_ip4.address", "value": "10.0.0.1/24", "negate": true}`, "invalid"},
		{"refuse/missing-key-before-a-true-member", `{"or": [{"attr": "nope", "value": 1}, {"attr": "id", "value": 12}]}`, "invalid"},
		{"refuse/list-item-without-the-key", `{"attr": "tags.name", "value": "gpu", "op": "contains"}`, "invalid"},
		{"refuse/contains-number-in-string", `{"attr": "name", "value": 1, "op": "contains"}`, "invalid"},
		{"refuse/contains-list-in-dict-unhashable", `{"attr": "custom_fields.weights", "value": ["a"], "op": "contains"}`, "invalid"},
		{"refuse/contains-in-null", `{"attr": "custom_fields.fleet_state", "value": "x", "op": "contains"}`, "invalid"},
		{"refuse/regex-on-number", `{"attr": "id", "value": "1", "op": "regex"}`, "invalid"},
		{"refuse/gt-on-null-negated-is-not-true", `{"attr": "primary_ip4", "value": 1, "op": "gt", "negate": true}`, "invalid"},
		{"refuse/path-through-a-string-raises", `{"attr": "name.first", "value": "n"}`, "raise TypeError"},
		{"refuse/path-through-a-number-raises", `{"attr": "id.x", "value": 1}`, "raise TypeError"},
		{"refuse/path-through-true-raises", `{"attr": "enabled.x", "value": 1}`, "raise TypeError"},
		{"refuse/list-item-a-string-raises", `{"attr": "mixed.slug", "value": "gpu", "op": "contains"}`, "raise TypeError"},
		{"refuse/attr-not-a-string-raises", `{"attr": 5, "value": 1}`, "raise AttributeError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseConditions(mustDecode(t, tt.cond))
			if err != nil {
				t.Fatalf("NetBox accepts %s; the emulator refused it: %v", tt.cond, err)
			}
			if got := outcome(t, s, condData); got != tt.want {
				t.Errorf("on the rendered data: %s = %s, want %s", tt.cond, got, tt.want)
			}
			// As a receiver decodes it: the same answer from maps and json.Numbers.
			if got := outcome(t, s, mustDecode(t, string(encodeREST(condData)))); got != tt.want {
				t.Errorf("on decoded data: %s = %s, want %s", tt.cond, got, tt.want)
			}
		})
	}
	var none *condSet
	if got := outcome(t, none, condData); got != "true" {
		t.Errorf("no conditions = %s, want true (NetBox: a rule without conditions always fires)", got)
	}
}

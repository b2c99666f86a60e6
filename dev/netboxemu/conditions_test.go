package netboxemu

import (
	"testing"

	"github.com/folly-infra/fleetd/netbox"
)

// The data a device update's conditions see: REST shapes (status as value/label, select custom
// fields as raw strings, nested objects, lists).
var condData = obj{
	{"id", 12}, {"name", "node1"},
	{"status", obj{{"value", "active"}, {"label", "Active"}}},
	{"primary_ip4", nil},
	{"interface_count", 2},
	{"enabled", true},
	{"tags", []any{obj{{"slug", "gpu"}}, obj{{"slug", "lab"}}}},
	{"custom_fields", obj{{"desired_action", "provision"}, {"fleet_state", nil}, {"ek_sha256", "ab,cd"},
		{"weights", map[string]any{"a": 1}}}},
}

func TestConditions(t *testing.T) {
	tests := []struct {
		name string
		cond string
		want bool
	}{
		{"ok/eq", `{"attr": "custom_fields.desired_action", "value": "provision"}`, true},
		{"ok/eq-false", `{"attr": "custom_fields.desired_action", "value": "wipe"}`, false},
		{"ok/eq-null", `{"attr": "custom_fields.fleet_state", "value": null}`, true},
		{"ok/negate-null", `{"attr": "custom_fields.desired_action", "value": null, "negate": true}`, true},
		{"ok/in", `{"attr": "custom_fields.desired_action", "value": ["provision", "attest"], "op": "in"}`, true},
		{"ok/in-false", `{"attr": "status.value", "value": ["offline"], "op": "in"}`, false},
		{"ok/contains-substring", `{"attr": "custom_fields.ek_sha256", "value": "b,c", "op": "contains"}`, true},
		{"ok/contains-across-list", `{"attr": "tags.slug", "value": "gpu", "op": "contains"}`, true},
		{"ok/contains-dict-key", `{"attr": "custom_fields.weights", "value": "a", "op": "contains"}`, true},
		{"ok/regex-anchored-at-start", `{"attr": "name", "value": "node\\d", "op": "regex"}`, true},
		{"ok/regex-not-search", `{"attr": "name", "value": "\\d", "op": "regex"}`, false},
		{"ok/gt", `{"attr": "interface_count", "value": 1, "op": "gt"}`, true},
		{"ok/lte-float", `{"attr": "interface_count", "value": 1.5, "op": "lte"}`, false},
		{"ok/eq-bool-is-int", `{"attr": "enabled", "value": 1}`, true},
		{"ok/and", `{"and": [{"attr": "status.value", "value": "active"}, {"attr": "custom_fields.desired_action", "value": "provision"}]}`, true},
		{"ok/and-one-false", `{"and": [{"attr": "status.value", "value": "active"}, {"attr": "custom_fields.desired_action", "value": "wipe"}]}`, false},
		{"ok/or", `{"or": [{"attr": "status.value", "value": "decommissioning"}, {"attr": "custom_fields.desired_action", "value": "provision"}]}`, true},
		{"ok/or-short-circuits-before-missing-key", `{"or": [{"attr": "id", "value": 12}, {"attr": "nope", "value": 1}]}`, true},
		{"ok/nested", `{"and": [{"or": [{"attr": "id", "value": 1}, {"attr": "id", "value": 12}]}, {"attr": "name", "value": "node1"}]}`, true},
		{"refuse/missing-key-is-false", `{"attr": "custom_fields.nope", "value": null}`, false},
		{"refuse/missing-key-negated-is-still-false", `{"attr": "custom_fields.nope", "value": "x", "negate": true}`, false},
		{"refuse/null-intermediate-is-false", `{"attr": "primary_ip4.address", "value": "10.0.0.1/24", "negate": true}`, false},
		{"refuse/missing-key-in-or-is-false", `{"or": [{"attr": "nope", "value": 1}, {"attr": "id", "value": 12}]}`, false},
		{"refuse/status-is-a-dict", `{"attr": "status", "value": "active"}`, false},
		{"refuse/gt-on-string-is-false", `{"attr": "name", "value": 1, "op": "gt"}`, false},
		{"refuse/regex-on-number-is-false", `{"attr": "id", "value": "1", "op": "regex"}`, false},
		{"refuse/scalar-path-is-false", `{"attr": "name.first", "value": "n"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := netbox.ParseConditions([]byte(tt.cond))
			if err != nil {
				t.Fatal(err)
			}
			// Data goes through a JSON round trip, as a webhook receiver would see it.
			data, _ := decodeJSON(encodeREST(condData))
			if got := evalConditions(c, data); got != tt.want {
				t.Errorf("eval on decoded data = %v, want %v", got, tt.want)
			}
			if got := evalConditions(c, condData); got != tt.want {
				t.Errorf("eval on rendered data = %v, want %v", got, tt.want)
			}
		})
	}
	if !evalConditions(nil, condData) {
		t.Error("no conditions must always match")
	}
}

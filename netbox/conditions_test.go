package netbox

import (
	"encoding/json"
	"testing"
)

func TestParseConditions(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		leaves int
		err    bool
	}{
		{"ok/null-means-always", `null`, 0, false},
		{"ok/empty-object-means-always", `{}`, 0, false},
		{"ok/bare-leaf", `{"attr": "status.value", "value": "active"}`, 1, false},
		{"ok/nested", `{"or": [{"attr": "a", "value": 1, "op": "gt"}, {"and": [{"attr": "b", "value": [1, 2], "op": "in"}, {"attr": "c", "value": null, "negate": true}]}]}`, 3, false},
		{"ok/float-lte", `{"attr": "a", "value": 1.5, "op": "lte"}`, 1, false},
		{"ok/bool-contains", `{"attr": "a", "value": true, "op": "contains"}`, 1, false},
		{"ok/empty-set", `{"and": []}`, 0, false},
		{"refuse/list-top", `[{"attr": "a", "value": 1}]`, 0, true},
		{"refuse/set-of-object", `{"and": {"attr": "a", "value": 1}}`, 0, true},
		{"refuse/negate-string", `{"attr": "a", "value": 1, "negate": "yes"}`, 0, true},
		{"refuse/list-gt", `{"attr": "a", "value": [1], "op": "gt"}`, 0, true},
		{"refuse/str-in", `{"attr": "a", "value": "x", "op": "in"}`, 0, true},
		{"refuse/extra-key", `{"attr": "a", "value": "x", "cmp": "eq"}`, 0, true},
		{"refuse/nested-uppercase-logic", `{"or": [{"AND": []}]}`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConditions([]byte(tt.raw))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if err != nil {
				return
			}
			n := 0
			if c != nil {
				n = len(c.Leaves())
				// The tree writes back as JSON that parses to the same tree.
				b, _ := json.Marshal(c)
				again, err := ParseConditions(b)
				if err != nil || again.String() != c.String() {
					t.Errorf("round trip %s -> %v, %v", b, again, err)
				}
			}
			if n != tt.leaves {
				t.Errorf("leaves = %d, want %d", n, tt.leaves)
			}
		})
	}
}

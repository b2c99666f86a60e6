package netbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/netboxemu"
)

// conditionCases are conditions and how ParseConditions reads them: "ok" (accepted, with its
// number of leaves), "refused" (NetBox refuses the rule: a 400, or a server error when it is
// saved) or "misread" (NetBox saves the rule but reads it otherwise than it looks; fleetd
// refuses it in its own file).
var conditionCases = []struct {
	name   string
	raw    string
	want   string
	leaves int
}{
	{"ok/null-means-always", `null`, "ok", 0},
	{"ok/empty-object-means-always", `{}`, "ok", 0},
	{"ok/bare-leaf", `{"attr": "status.value", "value": "active"}`, "ok", 1},
	{"ok/nested", `{"or": [{"attr": "a", "value": 1, "op": "gt"}, {"and": [{"attr": "b", "value": [1, 2], "op": "in"}, {"attr": "c", "value": null, "negate": true}]}]}`, "ok", 3},
	{"ok/float-lte", `{"attr": "a", "value": 1.5, "op": "lte"}`, "ok", 1},
	{"ok/bool-contains", `{"attr": "a", "value": true, "op": "contains"}`, "ok", 1},
	{"ok/list-contains", `{"attr": "a", "value": [1], "op": "contains"}`, "ok", 1},
	{"ok/regex", `{"attr": "name", "value": "^node[0-9]+", "op": "regex"}`, "ok", 1},
	{"ok/empty-set", `{"and": []}`, "ok", 0},
	{"refuse/list-top", `[{"attr": "a", "value": 1}]`, "refused", 0},
	{"refuse/string-top", `"status.value"`, "refused", 0},
	{"refuse/set-of-object", `{"and": {"attr": "a", "value": 1}}`, "refused", 0},
	{"refuse/set-of-number", `{"or": 1}`, "refused", 0},
	{"refuse/set-of-null", `{"or": null}`, "refused", 0},
	{"refuse/member-not-an-object", `{"or": ["status.value"]}`, "refused", 0},
	{"refuse/list-gt", `{"attr": "a", "value": [1], "op": "gt"}`, "refused", 0},
	{"refuse/str-in", `{"attr": "a", "value": "x", "op": "in"}`, "refused", 0},
	{"refuse/null-gt", `{"attr": "a", "value": null, "op": "gt"}`, "refused", 0},
	{"refuse/dict-value", `{"attr": "a", "value": {"b": 1}}`, "refused", 0},
	{"refuse/unknown-op", `{"attr": "a", "value": 1, "op": "neq"}`, "refused", 0},
	{"refuse/null-op", `{"attr": "a", "value": 1, "op": null}`, "refused", 0},
	{"refuse/extra-key", `{"attr": "a", "value": "x", "cmp": "eq"}`, "refused", 0},
	{"refuse/nested-extra-key", `{"and": [{"attr": "a", "value": "x", "cmp": "eq"}]}`, "refused", 0},
	{"refuse/missing-value", `{"attr": "a", "op": "eq"}`, "refused", 0},
	{"refuse/nested-missing-value", `{"and": [{"attr": "a"}]}`, "refused", 0},
	{"refuse/missing-attr", `{"value": 1, "op": "eq"}`, "refused", 0},
	{"refuse/one-key-not-logic", `{"attr": "a"}`, "refused", 0},
	{"refuse/upper-case-logic", `{"AND": [{"attr": "a", "value": 1}]}`, "refused", 0},
	{"refuse/nested-uppercase-logic", `{"or": [{"AND": []}]}`, "refused", 0},
	{"refuse/unknown-op-before-negate", `{"attr": "a", "value": 1, "op": "neq", "negate": "yes"}`, "refused", 0},
	{"refuse/false-is-no-conditions", `false`, "misread", 0},
	{"refuse/empty-list-is-no-conditions", `[]`, "misread", 0},
	{"refuse/empty-string-is-no-conditions", `""`, "misread", 0},
	{"refuse/set-of-empty-string", `{"and": ""}`, "misread", 0},
	{"refuse/negate-string", `{"attr": "a", "value": 1, "negate": "false"}`, "misread", 0},
	{"refuse/negate-number", `{"and": [{"attr": "a", "value": 1, "negate": 1}]}`, "misread", 0},
	{"refuse/attr-not-a-string", `{"attr": 5, "value": 1}`, "misread", 0},
	{"refuse/attr-empty", `{"attr": "", "value": 1}`, "misread", 0},
}

// verdict is what ParseConditions made of raw: "ok", "refused" or "misread".
func verdict(t *testing.T, raw string) (string, *Conditions) {
	t.Helper()
	c, err := ParseConditions([]byte(raw))
	if err == nil {
		return "ok", c
	}
	var ce *ConditionsError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %T %v is not a *ConditionsError", raw, err, err)
	}
	if ce.Saved {
		return "misread", nil
	}
	return "refused", nil
}

func TestParseConditions(t *testing.T) {
	for _, tt := range conditionCases {
		t.Run(tt.name, func(t *testing.T) {
			got, c := verdict(t, tt.raw)
			if got != tt.want {
				t.Fatalf("%s: %s, want %s", tt.raw, got, tt.want)
			}
			if got != "ok" {
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

// TestParseConditionsAgreesWithNetBox saves a rule with each case's conditions in the NetBox
// emulator, whose reading of conditions is its own (written from NetBox's extras/conditions.py
// and tested against NetBox's cases, sharing no code with this package): what fleetd accepts
// NetBox saves, what fleetd says NetBox refuses it refuses (400, or a 500 from what clean does
// not catch), and what fleetd says NetBox misreads it saves.
func TestParseConditionsAgreesWithNetBox(t *testing.T) {
	emu, err := netboxemu.Start(netboxemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	raw, err := os.ReadFile("../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.LoadSchema(raw, "http://127.0.0.1:1", "secret"); err != nil {
		t.Fatal(err)
	}
	tok, err := emu.AddToken(netboxemu.TokenSpec{User: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	save := func(t *testing.T, name, conditions string) (int, string) {
		body := fmt.Sprintf(`{"name": %q, "object_types": ["dcim.device"], "event_types": ["object_updated"], "action_object_type": "extras.webhook", "action_object_id": 1, "conditions": %s}`, name, conditions)
		req, _ := http.NewRequest(http.MethodPost, emu.URL()+"/api/extras/event-rules/", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, tt := range conditionCases {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verdict(t, tt.raw)
			status, body := save(t, fmt.Sprintf("rule-%d", i), tt.raw)
			netboxSaves := status == http.StatusCreated
			if netboxSaves != (got != "refused") || status != http.StatusCreated && status != http.StatusBadRequest && status != http.StatusInternalServerError {
				t.Errorf("fleetd: %s; NetBox (the emulator) answers %d %s", got, status, body)
			}
		})
	}
}

package netboxemu

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// webhookID is the id of one of the schema's webhooks.
func (f *fixture) webhookID(t *testing.T, name string) int {
	t.Helper()
	status, _, b := f.do(t, "GET", "/api/extras/webhooks/?name="+name, "Token "+f.admin, "")
	var page struct {
		Results []struct{ ID int }
	}
	if err := json.Unmarshal(b, &page); status != 200 || err != nil || len(page.Results) != 1 {
		t.Fatalf("webhook %s: %d %s", name, status, b)
	}
	return page.Results[0].ID
}

// postRule creates an event rule on device updates whose action is the webhook hook.
func (f *fixture) postRule(t *testing.T, name, conditions string, hook int) (int, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"name": %q, "object_types": ["dcim.device"], "event_types": ["object_updated"], "action_type": "webhook", "action_object_type": "extras.webhook", "action_object_id": %d, "conditions": %s}`,
		name, hook, conditions)
	status, _, b := f.do(t, "POST", "/api/extras/event-rules/", "Token "+f.admin, body)
	got, err := decodeJSON(b)
	m, ok := got.(map[string]any)
	if err != nil || !ok {
		t.Fatalf("POST event rule: %d %s: %v", status, b, err)
	}
	return status, m
}

// TestEventRuleConditionsSaved: what saving a rule through the API does with its conditions,
// as EventRule.clean does it (NB@v4.6.8:netbox/extras/models/models.py, extras/conditions.py):
// the rule is stored with its conditions as given, refused 400 with NetBox's message on
// "conditions", or answered 500 when clean raises what it does not catch; a refused rule is
// not stored.
func TestEventRuleConditionsSaved(t *testing.T) {
	const ops = "eq, gt, gte, lt, lte, in, contains, regex"
	tests := []struct {
		name, cond string
		status     int
		want       string // 400: the message; 500: the exception's type
	}{
		{"ok/null-always-fires", `null`, 201, ""},
		{"ok/empty-dict-always-fires", `{}`, 201, ""},
		{"ok/empty-list-is-falsy-always-fires", `[]`, 201, ""},
		{"ok/empty-string-is-falsy-always-fires", `""`, 201, ""},
		{"ok/false-is-falsy-always-fires", `false`, 201, ""},
		{"ok/bare-condition", `{"attr": "status.value", "value": "active"}`, 201, ""},
		{"ok/nested-sets", `{"or": [{"attr": "a", "value": 1, "op": "gt"}, {"and": [{"attr": "b", "value": [1, 2], "op": "in"}, {"attr": "c", "value": null, "negate": true}]}]}`, 201, ""},
		{"ok/float-lte", `{"attr": "a", "value": 1.5, "op": "lte"}`, 201, ""},
		{"ok/bool-contains", `{"attr": "a", "value": true, "op": "contains"}`, 201, ""},
		{"ok/list-contains", `{"attr": "a", "value": [1], "op": "contains"}`, 201, ""},
		{"ok/regex", `{"attr": "name", "value": "^node[0-9]+$", "op": "regex"}`, 201, ""},
		{"ok/empty-set", `{"and": []}`, 201, ""},
		{"ok/set-of-empty-string", `{"and": ""}`, 201, ""},
		{"ok/negate-not-a-bool", `{"attr": "a", "value": 1, "negate": "yes"}`, 201, ""},
		{"ok/attr-not-a-string-is-not-checked", `{"attr": 5, "value": 1}`, 201, ""},
		{"ok/empty-attr-is-not-checked", `{"attr": "", "value": 1}`, 201, ""},
		{"refuse/unknown-operator", `{"attr": "x", "value": 1, "op": "blah"}`, 400, "Unknown operator: blah. Must be one of: " + ops},
		{"refuse/null-operator", `{"attr": "x", "value": 1, "op": null}`, 400, "Unknown operator: None. Must be one of: " + ops},
		{"refuse/dict-value", `{"attr": "x", "value": {"a": 1}}`, 400, "Unsupported value type: <class 'dict'>"},
		{"refuse/gt-on-string-value", `{"attr": "x", "value": "foo", "op": "gt"}`, 400, "Invalid type for gt operation: <class 'str'>"},
		{"refuse/in-on-int-value", `{"attr": "x", "value": 123, "op": "in"}`, 400, "Invalid type for in operation: <class 'int'>"},
		{"refuse/gt-on-null-value", `{"attr": "x", "value": null, "op": "gt"}`, 400, "Invalid type for gt operation: <class 'NoneType'>"},
		{"refuse/gt-on-bool-value", `{"attr": "x", "value": true, "op": "gt"}`, 400, "Invalid type for gt operation: <class 'bool'>"},
		{"refuse/invalid-logic", `{"foo": []}`, 400, "Invalid logic type: must be 'AND' or 'OR'. Please check documentation."},
		{"refuse/one-key-condition", `{"attr": "x"}`, 400, "Invalid logic type: must be 'AND' or 'OR'. Please check documentation."},
		{"refuse/incorrect-key", `{"foo": "status.value", "value": "active"}`, 400, "Incorrect key(s) informed. Please check documentation."},
		{"refuse/missing-value", `{"attr": "x", "op": "eq"}`, 400, "Incorrect key(s) informed. Please check documentation."},
		{"refuse/list", `[{"attr": "a", "value": 1}]`, 400, "Ruleset must be a dictionary, not <class 'list'>."},
		{"refuse/string", `"status.value"`, 400, "Ruleset must be a dictionary, not <class 'str'>."},
		{"refuse/nested-unknown-operator", `{"and": [{"attr": "x", "value": 1, "op": "neq"}]}`, 400, "Unknown operator: neq. Must be one of: " + ops},
		{"refuse/regex-go-cannot-compile", `{"attr": "name", "value": "node(?=1)", "op": "regex"}`, 400, "The NetBox emulator matches regex conditions with Go's RE2"},
		{"refuse/upper-case-logic-raises", `{"AND": [{"attr": "a", "value": 1}]}`, 500, "KeyError"},
		{"refuse/nested-incorrect-key-raises", `{"and": [{"attr": "a", "value": 1, "cmp": "eq"}]}`, 500, "TypeError"},
		{"refuse/nested-missing-value-raises", `{"or": [{"attr": "a"}, {"attr": "b", "value": 1}]}`, 500, "TypeError"},
		{"refuse/nested-upper-case-logic-raises", `{"or": [{"AND": []}]}`, 500, "TypeError"},
		{"refuse/member-not-a-dict-raises", `{"or": ["status.value"]}`, 500, "TypeError"},
		{"refuse/members-a-dict-raises", `{"and": {"attr": "a", "value": 1}}`, 500, "TypeError"},
		{"refuse/members-a-number-raises", `{"and": 1}`, 500, "TypeError"},
	}
	f := newFixture(t)
	hook := f.webhookID(t, "fleetd-inventory")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("rule-%d", i)
			status, got := f.postRule(t, name, tt.cond, hook)
			if status != tt.status {
				t.Fatalf("POST = %d %v, want %d", status, got, tt.status)
			}
			switch status {
			case 201:
				if want := mustDecode(t, tt.cond); !reflect.DeepEqual(got["conditions"], want) {
					t.Errorf("stored conditions %v, want them as given: %s", got["conditions"], tt.cond)
				}
				return
			case 400:
				msgs, _ := got["conditions"].([]any)
				if len(got) != 1 || len(msgs) != 1 || !strings.HasPrefix(fmt.Sprint(msgs[0]), tt.want) {
					t.Errorf("400 body %v, want {\"conditions\": [%q...]}", got, tt.want)
				}
			case 500:
				if got["exception"] != tt.want || got["netbox_version"] != Version || got["error"] == "" {
					t.Errorf("500 body %v, want NetBox's exception shape with %s", got, tt.want)
				}
			}
			s, _, b := f.do(t, "GET", "/api/extras/event-rules/?name="+name, "Token "+f.admin, "")
			if s != 200 || !strings.Contains(string(b), `"count":0`) {
				t.Errorf("a refused rule was stored: %s", b)
			}
		})
	}
}

// TestConditionsAtTheEndOfARequest: what a rule's conditions do to the request whose change
// they are evaluated on (NB@v4.6.8:netbox/extras/events.py process_event_queue, run by
// netbox/context_managers.py event_tracking after the view). A condition that cannot be
// evaluated (a missing key) makes its rule false, and the others fire. A condition whose path
// runs through a string raises a TypeError nothing catches: the change is saved, the request
// is answered 500, the rules before it in name order have queued their webhooks and the rules
// after it never run.
func TestConditionsAtTheEndOfARequest(t *testing.T) {
	f := newFixture(t)
	hook := f.webhookID(t, "fleetd-inventory")
	for _, r := range []struct{ name, cond string }{
		{"aa-first", `null`},
		{"bb-missing-key", `{"attr": "custom_fields.nope", "value": null}`},
		{"cc-after", `null`},
	} {
		if status, got := f.postRule(t, r.name, r.cond, hook); status != 201 {
			t.Fatalf("rule %s: %d %v", r.name, status, got)
		}
	}
	auth := "Token " + f.admin
	fired := func(rule string) int { return len(ofRule(f.emu.Deliveries(), rule)) }

	// ok/invalid-condition: the request succeeds and every rule but the invalid one fires.
	if status, _, got := f.patchDevice(t, auth, `{"serial": "SN-2"}`); status != 200 {
		t.Fatalf("PATCH with an invalid condition = %d %v, want 200", status, got)
	}
	f.idle(t)
	for rule, want := range map[string]int{"aa-first": 1, "bb-missing-key": 0, "cc-after": 1, "fleetd-device-changed": 1} {
		if n := fired(rule); n != want {
			t.Errorf("after a PATCH with an invalid condition, %s fired %d times, want %d", rule, n, want)
		}
	}

	// refuse/condition-raises: the same rule set with a path through the device's name.
	if status, _, b := f.do(t, "POST", "/api/extras/event-rules/", auth, fmt.Sprintf(
		`{"name": "bb-raises", "object_types": ["dcim.device"], "event_types": ["object_updated"], "action_object_type": "extras.webhook", "action_object_id": %d, "conditions": {"attr": "name.first", "value": "n"}}`, hook)); status != 201 {
		t.Fatalf("rule bb-raises: %d %s (NetBox does not check a path when it saves a rule)", status, b)
	}
	changes := len(f.emu.Changes("dcim.device", f.dev))
	status, h, b := f.do(t, "PATCH", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), auth, `{"serial": "SN-3"}`)
	if status != 500 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || h.Get("API-Version") != "" ||
		!strings.Contains(string(b), "TypeError") {
		t.Fatalf("PATCH with a raising condition = %d %v %s, want NetBox's 500 page without API-Version", status, h, b)
	}
	f.idle(t)
	for rule, want := range map[string]int{"aa-first": 2, "bb-missing-key": 0, "bb-raises": 0, "cc-after": 1, "fleetd-device-changed": 1} {
		if n := fired(rule); n != want {
			t.Errorf("after the failed request, %s fired %d times in all, want %d", rule, n, want)
		}
	}
	status, _, got := f.do(t, "GET", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), auth, "")
	if status != 200 || !strings.Contains(string(got), `"serial":"SN-3"`) {
		t.Errorf("the change of the failed request is not saved: %d %s", status, got)
	}
	if n := len(f.emu.Changes("dcim.device", f.dev)); n != changes+1 {
		t.Errorf("change records %d, want %d: the failed request's change is recorded", n, changes+1)
	}
}

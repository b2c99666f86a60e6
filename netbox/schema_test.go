package netbox

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readSchemaFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLoadSchemaRepoFile(t *testing.T) {
	s, err := LoadSchema(strings.NewReader(readSchemaFile(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/v1/netbox/webhook", "/v1/netbox/webhook/attest", "/v1/netbox/webhook/provision",
		"/v1/netbox/webhook/retire", "/v1/netbox/webhook/wipe"}
	if diff := cmp.Diff(want, s.WebhookPaths()); diff != "" {
		t.Errorf("WebhookPaths (-want +got):\n%s", diff)
	}
	for _, w := range s.Webhooks {
		if !w.Signed || w.HTTPMethod != "POST" || w.ContentType != "application/json" {
			t.Errorf("webhook %+v: want signed POST application/json", w)
		}
	}
	rule := func(name string) EventRule {
		for _, r := range s.EventRules {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no event rule %s", name)
		return EventRule{}
	}
	prov := rule("fleetd-provision")
	if got := prov.Conditions.Leaves(); len(got) != 1 || got[0] != (Condition{Attr: "custom_fields.desired_action", Value: "provision", Op: "eq"}) {
		t.Errorf("provision rule leaves = %+v", got)
	}
	if r := rule("fleetd-inventory-addressing"); r.Conditions != nil || len(r.EventTypes) != 3 {
		t.Errorf("inventory rule = %+v, want no conditions and create/update/delete", r)
	}
	if f, _ := s.CustomField(CFState); f.UIEditable != "no" || f.ChoiceSet != "fleet_state" {
		t.Errorf("fleet_state = %+v", f)
	}
	if f, _ := s.CustomField(CFClass); f.UIEditable != "yes" {
		t.Errorf("fleet_class = %+v", f)
	}
}

func TestLoadSchemaRefusals(t *testing.T) {
	base := readSchemaFile(t)
	tests := []struct {
		name    string
		edit    func(string) string
		problem string
	}{
		{"refuse/unknown-top-level-key", func(s string) string { return s + "\nextra: 1\n" }, `unknown key "extra"`},
		{"refuse/unknown-webhook-key", func(s string) string {
			return strings.Replace(s, "    signed: true\n", "    signed: true\n    secret: x\n", 1)
		}, `webhooks[0]: unknown key "secret"`},
		{"refuse/unknown-choice-value", func(s string) string {
			return strings.Replace(s, "value: provision}", "value: provison}", 1)
		}, `provison is not in choice set fleet_desired_action`},
		{"refuse/unknown-status-value", func(s string) string {
			return strings.Replace(s, "value: decommissioning}", "value: decommissioned}", 1)
		}, `decommissioned is not in device statuses`},
		{"refuse/negated-unknown-status-matches-everything", func(s string) string {
			return strings.Replace(s, "value: decommissioning}", "value: decomissioning, negate: true}", 1)
		}, `status.value eq decomissioning is negated, so it matches every event: decomissioning is not in device statuses`},
		{"refuse/unknown-value-in-list", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: [attest, atest], op: in}", 1)
		}, `can never match on atest: atest is not in choice set fleet_desired_action`},
		{"refuse/negate-not-boolean", func(s string) string {
			return strings.Replace(s, "value: attest}", `value: attest, negate: "false"}`, 1)
		}, `negate in the condition on custom_fields.desired_action is "false", not true or false: NetBox negates`},
		{"refuse/false-conditions-fire-always", func(s string) string {
			return strings.Replace(s, "    conditions:\n      and:\n        - {attr: custom_fields.desired_action, value: attest}", "    conditions: false", 1)
		}, `conditions: conditions false: NetBox takes a false value for no conditions`},
		{"refuse/rule-names-missing-webhook", func(s string) string {
			return strings.Replace(s, "webhook: fleetd-wipe\n", "webhook: fleetd-wype\n", 1)
		}, `event rule fleetd-wipe: webhook "fleetd-wype" is not defined`},
		{"refuse/regex-on-int", func(s string) string {
			return strings.Replace(s, "{attr: status.value, value: decommissioning}", "{attr: status.value, value: 3, op: regex}", 1)
		}, `invalid type for regex operation: int`},
		{"refuse/in-with-string", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: attest, op: in}", 1)
		}, `invalid type for in operation: str`},
		{"refuse/gt-on-bool", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: true, op: gt}", 1)
		}, `invalid type for gt operation: bool`},
		{"refuse/null-with-contains", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: null, op: contains}", 1)
		}, `invalid type for contains operation: NoneType`},
		{"refuse/dict-value", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: {a: 1}}", 1)
		}, `unsupported value type dict`},
		{"refuse/unknown-operator", func(s string) string {
			return strings.Replace(s, "value: attest}", "value: attest, op: ne}", 1)
		}, `unknown operator ne`},
		{"refuse/leaf-without-value", func(s string) string {
			return strings.Replace(s, "{attr: custom_fields.desired_action, value: attest}", "{attr: custom_fields.desired_action, op: eq}", 1)
		}, `has no "value"`},
		{"refuse/bad-logic", func(s string) string {
			return strings.Replace(s, "      and:\n        - {attr: custom_fields.desired_action, value: wipe}", "      xor:\n        - {attr: custom_fields.desired_action, value: wipe}", 1)
		}, `invalid logic type "xor"`},
		{"refuse/duplicate-webhook", func(s string) string {
			return strings.Replace(s, "  - name: fleetd-attest\n    path:", "  - name: fleetd-provision\n    path:", 1)
		}, `webhook "fleetd-provision" is defined more than once`},
		{"refuse/path-prefix", func(s string) string {
			return strings.Replace(s, "path: /v1/netbox/webhook/wipe", "path: /v1/hooks/wipe", 1)
		}, `path "/v1/hooks/wipe" does not start with /v1/netbox/webhook`},
		{"refuse/full-url-path", func(s string) string {
			return strings.Replace(s, "path: /v1/netbox/webhook/wipe", "path: https://spore/v1/netbox/webhook/wipe", 1)
		}, `does not start with /v1/netbox/webhook`},
		{"refuse/unsigned", func(s string) string {
			return strings.Replace(s, "    signed: true\n", "    signed: false\n", 1)
		}, `signed is false`},
		{"refuse/bare-no", func(s string) string {
			return strings.Replace(s, `ui_editable: "no"`, `ui_editable: no`, 1)
		}, `wrong type`},
		{"refuse/missing-fleetd-field", func(s string) string {
			return strings.Replace(s, "  - name: lak_serial\n", "  - name: lak_serial_x\n", 1)
		}, `custom field lak_serial is missing`},
		{"refuse/state-editable", func(s string) string {
			return strings.Replace(s, "    weight: 200\n    description: Where fleetd is in carrying out the device's last request.\n    ui_visible: if-set\n    ui_editable: \"no\"",
				"    weight: 200\n    description: Where fleetd is in carrying out the device's last request.\n    ui_visible: if-set\n    ui_editable: \"yes\"", 1)
		}, `fleet_state: fleetd writes it, so ui_editable must be "no"`},
		{"refuse/choice-set-differs", func(s string) string {
			return strings.Replace(s, `      - ["rejected", "Rejected"]`+"\n", "", 1)
		}, `choice set fleet_state has values`},
		{"refuse/unknown-event-type", func(s string) string {
			return strings.Replace(s, "event_types: [object_created, object_deleted]", "event_types: [object_created, object_removed]", 1)
		}, `event type "object_removed"`},
		{"refuse/cf-not-on-object-type", func(s string) string {
			return strings.Replace(s, "    event_types: [object_created, object_updated, object_deleted]\n    webhook: fleetd-inventory\n    enabled: true\n    conditions: null",
				"    event_types: [object_created, object_updated, object_deleted]\n    webhook: fleetd-inventory\n    enabled: true\n    conditions: {attr: custom_fields.tpm, value: \"2.0\"}", 1)
		}, `tpm is not a custom field of dcim.interface`},
		{"refuse/unused-webhook", func(s string) string {
			return strings.Replace(s, "webhook: fleetd-retire\n", "webhook: fleetd-wipe\n", 1)
		}, `webhook fleetd-retire is the action of no event rule`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edited := tt.edit(base)
			if edited == base {
				t.Fatal("the edit changed nothing; fix the test")
			}
			_, err := LoadSchema(strings.NewReader(edited))
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("LoadSchema error = %v, want a *SchemaError", err)
			}
			if !strings.Contains(err.Error(), tt.problem) {
				t.Errorf("error does not mention %q:\n%v", tt.problem, err)
			}
		})
	}
}

func TestLoadSchemaListsEveryProblem(t *testing.T) {
	s := readSchemaFile(t)
	s = strings.Replace(s, "path: /v1/netbox/webhook/wipe", "path: /wipe", 1)
	s = strings.Replace(s, "value: provision}", "value: provison}", 1)
	s = strings.Replace(s, "webhook: fleetd-attest\n", "webhook: nope\n", 1)
	s += "\nbogus: true\n"
	_, err := LoadSchema(strings.NewReader(s))
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{`unknown key "bogus"`, `path "/wipe"`, "provison", `webhook "nope"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
}

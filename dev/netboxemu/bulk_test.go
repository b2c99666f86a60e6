package netboxemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestBulkWritesAreAtomic: a refused object in a bulk write undoes the accepted ones before
// it, and leaves no change record and no webhook behind.
func TestBulkWritesAreAtomic(t *testing.T) {
	f := newFixture(t)
	seedClientInventory(t, f)
	admin := "Token " + f.admin
	before, _ := f.emu.DeviceJSON(f.dev)
	changes := len(f.emu.changes)
	// node1 (id 1) comes first in the model's ordering, so its provision request is saved, then
	// undone when node2's status is refused.
	status, _, body := f.do(t, "PATCH", "/api/dcim/devices/", admin,
		`[{"id": 2, "status": "retired"}, {"id": 1, "custom_fields": {"desired_action": "provision"}}]`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), `"status"`) {
		t.Fatalf("bulk PATCH = %d %s, want 400 for node2's status", status, body)
	}
	f.idle(t)
	if after, _ := f.emu.DeviceJSON(f.dev); string(after) != string(before) {
		t.Error("a refused bulk PATCH changed node1")
	}
	if len(f.emu.changes) != changes || len(f.rcv.received()) != 0 {
		t.Errorf("a refused bulk PATCH left %d change records and %d webhooks", len(f.emu.changes)-changes, len(f.rcv.received()))
	}
	// Accepted: both saved, answered in the model's ordering; an unknown id is skipped.
	status, _, body = f.do(t, "PATCH", "/api/dcim/devices/", admin,
		`[{"id": 2, "description": "b"}, {"id": 99, "description": "x"}, {"id": 1, "description": "a"}]`)
	var out []struct {
		ID          int    `json:"id"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal(body, &out); status != 200 || err != nil || len(out) != 2 || out[0].ID != 1 || out[1].Description != "b" {
		t.Errorf("bulk PATCH = %d %s, want node1 then node2", status, body)
	}
	// Bulk DELETE: interfaces 3 (worker-a's) and 1 (node1's eth0) go, their MACs with them.
	if status, _, body = f.do(t, "DELETE", "/api/dcim/interfaces/", admin, `[{"id": 3}, {"id": 1}]`); status != http.StatusNoContent {
		t.Errorf("bulk DELETE = %d %s", status, body)
	}
	if names, _, _ := f.listNames(t, "/api/dcim/mac-addresses/"); strings.Join(names, ",") != "AA:BB:CC:00:11:99,AA:BB:CC:00:22:02" {
		t.Errorf("MACs after the bulk delete = %v", names)
	}
}

func TestBulkRefusals(t *testing.T) {
	f := newFixture(t)
	admin := "Token " + f.admin
	tests := []struct {
		name, method, path, body, want string
	}{
		{"refuse/not-a-list", "PATCH", "/api/dcim/devices/", `{"id": 1}`, `{"non_field_errors":["Expected a list of items but got type \"dict\"."]}`},
		{"refuse/missing-id", "PATCH", "/api/dcim/devices/", `[{"id": 1}, {"serial": "x"}]`, `[{},{"id":["This field is required."]}]`},
		{"refuse/id-not-integer", "DELETE", "/api/dcim/devices/", `[{"id": "one"}]`, `[{"id":["A valid integer is required."]}]`},
		{"refuse/bulk-create-one-bad", "POST", "/api/dcim/interfaces/",
			`[{"device": 1, "name": "eth9", "type": "virtual"}, {"device": 1, "name": "eth10", "type": "warp"}]`,
			`[{},{"type":["\"warp\" is not a valid choice."]}]`},
		{"refuse/read-only-endpoint", "POST", "/api/core/object-changes/", `{}`, `{"detail":"Method \"POST\" not allowed."}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := f.do(t, tt.method, tt.path, admin, tt.body)
			if status/100 != 4 || string(body) != tt.want {
				t.Errorf("%s %s = %d %s\nwant %s", tt.method, tt.path, status, body, tt.want)
			}
		})
	}
	if names, _, _ := f.listNames(t, "/api/dcim/interfaces/"); len(names) != 2 {
		t.Errorf("interfaces after the refused bulk create = %v, want the two seeded", names)
	}
	status, _, body := f.do(t, "POST", "/api/dcim/interfaces/", admin,
		`[{"device": 1, "name": "eth9", "type": "virtual"}, {"device": 1, "name": "eth10", "type": "virtual"}]`)
	if status != http.StatusCreated || !strings.Contains(string(body), `"name":"eth9"`) || !strings.Contains(string(body), `"name":"eth10"`) {
		t.Errorf("bulk create = %d %s", status, body)
	}
}

// TestAPIRootAndOptions: GET /api/ needs a token; OPTIONS lists choice fields' choices for a
// token that may write, and no actions for a read-only one.
func TestAPIRootAndOptions(t *testing.T) {
	f := newFixture(t)
	if status, _, body := f.do(t, "GET", "/api/", "", ""); status != http.StatusForbidden ||
		string(body) != `{"detail":"Authentication credentials were not provided."}` {
		t.Errorf("GET /api/ without a token = %d %s", status, body)
	}
	status, h, body := f.do(t, "GET", "/api/", bearer(f.fleetd), "")
	if status != 200 || h.Get("API-Version") != "4.6" || !strings.Contains(string(body), `"core":"`+f.emu.URL()+`/api/core/"`) {
		t.Errorf("GET /api/ = %d %v %s", status, h, body)
	}
	var meta struct {
		Name    string
		Actions map[string]map[string]struct {
			Type     string
			ReadOnly bool `json:"read_only"`
			Choices  []struct {
				Value       string
				DisplayName string `json:"display_name"`
			}
		}
	}
	_, _, body = f.do(t, "OPTIONS", "/api/dcim/devices/", bearer(f.fleetd), "")
	if err := json.Unmarshal(body, &meta); err != nil || meta.Name != "Device List" {
		t.Fatalf("OPTIONS = %v %s", err, body)
	}
	st := meta.Actions["POST"]["status"]
	if len(st.Choices) != 7 || st.Choices[6].Value != "decommissioning" || st.Choices[6].DisplayName != "Decommissioning" {
		t.Errorf("status choices = %+v", st.Choices)
	}
	if !meta.Actions["PUT"]["id"].ReadOnly {
		t.Error("id is not read-only in the PUT metadata")
	}
	ro, _ := f.emu.AddToken(TokenSpec{User: "viewer", ReadOnly: true})
	_, _, body = f.do(t, "OPTIONS", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), bearer(ro), "")
	if strings.Contains(string(body), "actions") || !strings.Contains(string(body), `"Device Instance"`) {
		t.Errorf("OPTIONS for a read-only token = %s, want no actions", body)
	}
}

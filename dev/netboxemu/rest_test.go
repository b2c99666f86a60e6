package netboxemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func (f *fixture) patchDevice(t *testing.T, auth, body string, header ...string) (int, http.Header, map[string]any) {
	t.Helper()
	status, h, b := f.do(t, "PATCH", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), auth, body, header...)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil && status != http.StatusNoContent {
		t.Fatalf("decode %d %s: %v", status, b, err)
	}
	return status, h, out
}

func TestCustomFieldMergeAndNullClears(t *testing.T) {
	f := newFixture(t)
	auth := bearer(f.fleetd)
	status, _, got := f.patchDevice(t, auth, `{"custom_fields": {"fleet_state": "pending", "fleet_request": "provision-a"}}`)
	if status != 200 {
		t.Fatalf("patch = %d %v", status, got)
	}
	// Omitted keys are untouched; the owner's declaration survives fleetd's write.
	status, _, got = f.patchDevice(t, auth, `{"custom_fields": {"fleet_request": null}}`)
	if status != 200 {
		t.Fatalf("patch = %d %v", status, got)
	}
	cf := got["custom_fields"].(map[string]any)
	for k, want := range map[string]any{"fleet_state": "pending", "fleet_request": nil, "fleet_class": "talos-cp",
		"disk_serial": "DISK1", "tpm": "2.0", "boot_check": nil} {
		if cf[k] != want {
			t.Errorf("custom_fields[%s] = %v, want %v", k, cf[k], want)
		}
	}
	stored, _ := f.emu.CustomFieldData(f.dev)
	want := map[string]any{"fleet_class": "talos-cp", "disk_serial": "DISK1", "tpm": "2.0",
		"fleet_state": "pending", "fleet_request": nil}
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("custom_field_data (-want +got): a null clears the key, never-set keys stay absent:\n%s", diff)
	}
}

func TestCustomFieldRefusals(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{"refuse/unknown-custom-field", `{"custom_fields": {"fleet_stat": "pending", "zzz": 1}}`,
			`{"custom_fields":{"fleet_stat":"Custom field 'fleet_stat' does not exist for this object type.","zzz":"Custom field 'zzz' does not exist for this object type."}}`},
		{"refuse/bad-choice", `{"custom_fields": {"tpm": "3.0"}}`,
			`{"__all__":["Invalid value for custom field 'tpm': Invalid choice (3.0) for choice set fleet_tpm."]}`},
		{"refuse/choice-of-wrong-type", `{"custom_fields": {"boot_check": 1}}`,
			`{"__all__":["Invalid value for custom field 'boot_check': Invalid choice (1) for choice set fleet_boot_check."]}`},
		{"refuse/text-not-string", `{"custom_fields": {"fleet_message": ["a"]}}`,
			`{"__all__":["Invalid value for custom field 'fleet_message': Value must be a string."]}`},
		{"refuse/custom-fields-not-a-dict", `{"custom_fields": ["fleet_state"]}`,
			`{"custom_fields":["Invalid data format. Custom field data must be passed as a dictionary mapping field names to their values."]}`},
		{"refuse/bad-status", `{"status": "retired"}`, `{"status":["\"retired\" is not a valid choice."]}`},
	}
	f := newFixture(t)
	before, _ := f.emu.DeviceJSON(f.dev)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := f.do(t, "PATCH", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), bearer(f.fleetd), tt.body)
			if status != http.StatusBadRequest || string(body) != tt.want {
				t.Errorf("got %d %s\nwant 400 %s", status, body, tt.want)
			}
		})
	}
	if after, _ := f.emu.DeviceJSON(f.dev); string(after) != string(before) {
		t.Error("a refused PATCH changed the device")
	}
	f.idle(t)
	if d := f.emu.Deliveries(); len(d) != 0 {
		t.Errorf("refused PATCHes fired %d webhooks", len(d))
	}
}

func TestETagIfMatch(t *testing.T) {
	f := newFixture(t)
	auth := bearer(f.fleetd)
	path := fmt.Sprintf("/api/dcim/devices/%d/", f.dev)
	_, h, _ := f.do(t, "GET", path, auth, "")
	tag := h.Get("ETag")
	if len(tag) < 10 || tag[:3] != `W/"` || tag[len(tag)-7:] != `+00:00"` {
		t.Fatalf("ETag = %q, want W/\"<isoformat>+00:00\"", tag)
	}
	// A no-op PATCH with the right ETag succeeds and changes the ETag.
	status, h2, _ := f.patchDevice(t, auth, `{}`, "If-Match", tag)
	if status != 200 || h2.Get("ETag") == tag || h2.Get("ETag") == "" {
		t.Fatalf("PATCH with current ETag = %d, new ETag %q (old %q)", status, h2.Get("ETag"), tag)
	}
	// The old ETag is now stale: 412 with the current ETag, nothing written.
	status, h3, body := f.patchDevice(t, auth, `{"custom_fields": {"fleet_state": "active"}}`, "If-Match", tag)
	if status != http.StatusPreconditionFailed || body["detail"] != "Precondition failed." || h3.Get("ETag") != h2.Get("ETag") {
		t.Errorf("stale If-Match = %d %v ETag %q", status, body, h3.Get("ETag"))
	}
	if cf, _ := f.emu.CustomFieldData(f.dev); cf["fleet_state"] != nil {
		t.Error("a 412 wrote the device")
	}
	// A list of ETags matches when one of them is current; * only asserts existence.
	status, _, _ = f.patchDevice(t, auth, `{}`, "If-Match", `W/"x", `+h2.Get("ETag"))
	if status != 200 {
		t.Errorf("If-Match list with the current ETag = %d", status)
	}
	status, _, _ = f.patchDevice(t, auth, `{}`, "If-Match", "*")
	if status != 200 {
		t.Errorf("If-Match * = %d", status)
	}
	// Without the header it is last-write-wins.
	if status, _, _ = f.patchDevice(t, auth, `{}`); status != 200 {
		t.Errorf("no If-Match = %d", status)
	}
	status, _, _ = f.do(t, "DELETE", path, auth, "", "If-Match", tag)
	if status != http.StatusPreconditionFailed {
		t.Errorf("DELETE with a stale If-Match = %d, want 412", status)
	}
	if status, _, _ = f.do(t, "GET", "/api/dcim/devices/999/", auth, ""); status != 404 {
		t.Errorf("GET a missing device = %d", status)
	}
}

func TestTokenAuth(t *testing.T) {
	f := newFixture(t)
	ro, err := f.emu.AddToken(TokenSpec{User: "viewer", Version: 2, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/api/dcim/devices/%d/", f.dev)
	tests := []struct {
		name   string
		method string
		auth   string
		status int
		detail string
	}{
		{"ok/v2-bearer", "GET", "Bearer " + f.fleetd, 200, ""},
		{"ok/v2-with-token-keyword", "GET", "Token " + f.fleetd, 200, ""},
		{"ok/v1-token", "GET", "Token " + f.admin, 200, ""},
		{"ok/keyword-any-case", "GET", "bearer " + f.fleetd, 200, ""},
		{"refuse/no-credentials", "GET", "", 403, "Authentication credentials were not provided."},
		{"refuse/unknown-scheme", "GET", "Basic abc", 403, "Authentication credentials were not provided."},
		{"refuse/bad-v1", "GET", "Token 0123456789abcdef0123456789abcdef01234567", 403, "Invalid v1 token"},
		{"refuse/bad-v2-secret", "GET", "Bearer " + f.fleetd + "x", 403, "Invalid v2 token"},
		{"refuse/v2-without-key", "GET", "Bearer nbt_abc", 403, "Invalid authorization header: Could not parse key from v2 token. Did you mean to use 'Token' instead of 'Bearer'?"},
		{"refuse/extra-words", "GET", "Token a b", 403, `Invalid authorization header: Must be in the form "Bearer <key>.<token>" or "Token <token>"`},
		{"refuse/read-only-write", "PATCH", "Bearer " + ro, 403, "You do not have permission to perform this action."},
		{"ok/read-only-read", "GET", "Bearer " + ro, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "PATCH" {
				body = "{}"
			}
			status, h, b := f.do(t, tt.method, path, tt.auth, body)
			var got struct{ Detail string }
			_ = json.Unmarshal(b, &got)
			if status != tt.status || got.Detail != tt.detail || h.Get("API-Version") != "4.6" {
				t.Errorf("got %d %q (API-Version %q), want %d %q", status, got.Detail, h.Get("API-Version"), tt.status, tt.detail)
			}
		})
	}
}

func TestDeviceCreateAndDelete(t *testing.T) {
	f := newFixture(t)
	auth := "Token " + f.admin
	status, h, b := f.do(t, "POST", "/api/dcim/devices/", auth, `{"name": "node2", "device_type": 1, "role": {"id": 1}, "site": 1}`)
	if status != 201 || h.Get("ETag") == "" {
		t.Fatalf("create = %d %s", status, b)
	}
	var d struct {
		ID           int
		Status       struct{ Value string }
		CustomFields map[string]any `json:"custom_fields"`
	}
	_ = json.Unmarshal(b, &d)
	if d.Status.Value != "active" || len(d.CustomFields) != f.cfs {
		t.Errorf("created %+v: want status active and every custom field", d)
	}
	status, _, b = f.do(t, "POST", "/api/dcim/devices/", auth, `{"name": "node2", "device_type": 1, "role": 1, "site": 1}`)
	if status != 400 || string(b) != `{"__all__":["Device name must be unique per site."]}` {
		t.Errorf("duplicate name = %d %s", status, b)
	}
	status, _, b = f.do(t, "POST", "/api/dcim/devices/", auth, `{"name": "node3", "role": 1, "site": 99}`)
	if status != 400 || string(b) != `{"device_type":["This field is required."],"site":["Related object not found using the provided numeric ID: 99"]}` {
		t.Errorf("bad create = %d %s", status, b)
	}
	if status, _, _ = f.do(t, "DELETE", fmt.Sprintf("/api/dcim/devices/%d/", d.ID), auth, ""); status != 204 {
		t.Errorf("delete = %d", status)
	}
	if status, _, _ = f.do(t, "GET", fmt.Sprintf("/api/dcim/devices/%d/", d.ID), auth, ""); status != 404 {
		t.Errorf("get deleted = %d", status)
	}
}

// The address filter of /api/ipam/ip-addresses/ matches a value without a mask against the host,
// whatever the stored mask, and a value with one exactly (NetBox's filter_address).
func TestIPAddressFilterByHost(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		query string
		want  int
	}{{"10.0.0.21", 1}, {"10.0.0.21/24", 1}, {"10.0.0.21/16", 0}, {"10.0.0.22", 0}} {
		status, _, body := f.do(t, "GET", "/api/ipam/ip-addresses/?address="+tc.query, bearer(f.fleetd), "")
		var page struct {
			Count int `json:"count"`
		}
		if err := json.Unmarshal(body, &page); status != 200 || err != nil || page.Count != tc.want {
			t.Errorf("address=%s: %d %s, want %d result(s)", tc.query, status, body, tc.want)
		}
	}
}

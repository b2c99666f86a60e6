package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// TestOperatorRoutes: the bearer token is required and compared exactly; the device views and the
// reconcile answer with what fleetd knows and did.
func TestOperatorRoutes(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionProvision
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{d}})
	do := func(method, path, token string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, f.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	rows := []struct {
		name, method, path, token string
		status                    int
		check                     func(map[string]any) bool
	}{
		{"refuse/no token", "GET", "/v1/devices", "", 401, func(b map[string]any) bool { return b["error"] == "unauthorized" }},
		{"refuse/wrong token", "GET", "/v1/devices", "op2", 401, nil},
		{"refuse/a prefix of the token", "GET", "/v1/devices/node-a", "o", 401, nil},
		{"refuse/reconcile without token changes nothing", "POST", "/v1/devices/node-a/reconcile", "", 401, nil},
		{"ok/list", "GET", "/v1/devices", "op", 200, func(b map[string]any) bool { return len(b["devices"].([]any)) == 1 }},
		{"ok/reconcile takes the request", "POST", "/v1/devices/node-a/reconcile", "op", 200, func(b map[string]any) bool { return b["outcome"] == "accepted" }},
		{"ok/one device shows its request and Workflow", "GET", "/v1/devices/node-a", "op", 200, func(b map[string]any) bool {
			wf, _ := b["workflow"].(map[string]any)
			return b["state"] == "pending" && wf != nil && wf["phase"] == "waiting"
		}},
		{"refuse/unknown device", "GET", "/v1/devices/nope", "op", 404, func(b map[string]any) bool { return b["error"] == "unknown_device" }},
		{"refuse/unknown device to reconcile", "POST", "/v1/devices/nope/reconcile", "op", 404, nil},
	}
	for _, r := range rows {
		status, body := do(r.method, r.path, r.token)
		if status != r.status || (r.check != nil && !r.check(body)) {
			t.Fatalf("%s: %d %v, want %d", r.name, status, body, r.status)
		}
		if r.name == "refuse/reconcile without token changes nothing" && f.Inv.Get(12).Owned.State != "" {
			t.Fatalf("an unauthenticated reconcile took the request")
		}
	}
}

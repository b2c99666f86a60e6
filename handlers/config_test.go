package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestConfigRoutes serves a pending configuration over HTTP: once, to the attested UUID from the
// device's address (the test client is 127.0.0.1), with the documented refusals.
func TestConfigRoutes(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Address = netip.MustParsePrefix("127.0.0.1/8")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	f := newFleetd(t, catalog(fleet.SecureBootAny), fleettest.Attested(d, machineUUID, time.Now(), time.Hour))
	get := func(path string) (int, string, map[string]string) {
		t.Helper()
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e map[string]string
		_ = json.Unmarshal(b, &e)
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", path)
		}
		return resp.StatusCode, string(b), e
	}
	steps := []struct {
		name, path string
		status     int
		code       string
	}{
		{"refuse/no uuid", "/v1/config/talos", 400, "missing_uuid"},
		{"refuse/another UUID, nothing consumed", "/v1/config/talos?uuid=00000000-0000-0000-0000-000000000000", 403, "wrong_uuid"},
		{"refuse/the seed route", "/v1/config/seed?uuid=" + machineUUID, 404, "wrong_kind"},
		{"ok/delivered once", "/v1/config/talos?uuid=" + machineUUID + "&serial=SN-1", 200, ""},
		{"refuse/second fetch is gone", "/v1/config/talos?uuid=" + machineUUID, 410, "config_delivered"},
	}
	for _, s := range steps {
		status, body, e := get(s.path)
		if status != s.status || e["error"] != s.code {
			t.Fatalf("%s: %d %s, want %d %s", s.name, status, body, s.status, s.code)
		}
		if s.code == "" && !strings.Contains(body, "machine:") {
			t.Fatalf("%s: body %q", s.name, body)
		}
		if s.code != "" && e["message"] == "" {
			t.Errorf("%s: refusal without a message", s.name)
		}
	}
	if got := f.inv.Get(12); got.Owned.State != fleet.StateActive || got.Status != fleet.StatusActive {
		t.Errorf("after delivery: state %q status %q, want active/active", got.Owned.State, got.Status)
	}
}

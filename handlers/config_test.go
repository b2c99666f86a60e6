package handlers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// attestedTalos is fleetd with node-a (12) at 127.0.0.1 configuring, attested with machineUUID.
func attestedTalos(t *testing.T) *fleetdUnderTest {
	t.Helper()
	d := fleettest.Declared(12, "node-a")
	d.Address = netip.MustParsePrefix("127.0.0.1/8")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	f := newFleetd(t, catalog(fleet.SecureBootAny), fleettest.Attested(d, machineUUID, time.Now(), time.Hour))
	return f
}

// TestConfigRoutes serves a pending configuration over HTTP: once, to the attested UUID from the
// device's address (the test client is 127.0.0.1), with the documented refusals.
func TestConfigRoutes(t *testing.T) {
	f := attestedTalos(t)
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

// TestConfigFetchTellsNothingOfOtherUUIDs fetches from an address no device has (127.0.0.2), once
// with the UUID the device at 127.0.0.1 attested with and once with a UUID no device has: both
// answers must be the same, or the answer would tell a prober which UUIDs have a configuration
// waiting (docs/security.md, "The configuration fetch"); nothing is delivered.
func TestConfigFetchTellsNothingOfOtherUUIDs(t *testing.T) {
	f := attestedTalos(t)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	answer := func(uuid string) string {
		t.Helper()
		resp, err := client.Get(f.url + "/v1/config/talos?uuid=" + uuid)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	waiting, nothing := answer(machineUUID), answer("00000000-0000-0000-0000-000000000000")
	if waiting != nothing {
		t.Errorf("the waiting UUID is answered %q, a UUID no device has %q: the answers tell them apart", waiting, nothing)
	}
	if !strings.HasPrefix(waiting, "404 ") || !strings.Contains(waiting, `"unknown_address"`) {
		t.Errorf("answer %q, want 404 unknown_address", waiting)
	}
	if got := f.inv.Get(12); got.Owned.State != fleet.StateConfiguring {
		t.Errorf("after the refused fetches the device is %s, want configuring (nothing delivered)", got.Owned.State)
	}
}

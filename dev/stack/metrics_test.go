package stack_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestMetricsNameNoDeviceToAnyone: the real fleetd with the stack's configuration serves its
// fleet-wide /metrics on the plain listener to anyone, naming none of the stack's devices, and
// the per-device series at /metrics/devices over https with the metrics token only: refused on
// the plain listener (tls_required), without the token (401) and with the operator's (401)
// (docs/operate.md, "Metrics and alerts").
func TestMetricsNameNoDeviceToAnyone(t *testing.T) {
	needStack(t)
	info := testStack.Info()
	get := func(base, path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(tctx(t), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return do(t, req)
	}
	code, public := get(info.Fleetd.HTTPURL, "/metrics", "")
	if code != http.StatusOK || !strings.Contains(public, "fleetd_active_nodes{") {
		t.Fatalf("GET /metrics on the plain listener: %d, fleetd_active_nodes %v", code, strings.Contains(public, "fleetd_active_nodes{"))
	}
	for _, d := range info.Devices {
		if strings.Contains(public, `"`+d.Name+`"`) {
			t.Errorf("the unauthenticated /metrics names %s", d.Name)
		}
	}
	if strings.Contains(public, `device="`) {
		t.Error("the unauthenticated /metrics has a device label")
	}
	for _, r := range []struct {
		name, base, token string
		want              int
	}{
		{"refuse/over plain HTTP, with the token", info.Fleetd.HTTPURL, info.Fleetd.MetricsToken, http.StatusForbidden},
		{"refuse/no token", info.Fleetd.URL, "", http.StatusUnauthorized},
		{"refuse/the operator's token", info.Fleetd.URL, info.Fleetd.OperatorToken, http.StatusUnauthorized},
		{"ok/the metrics token over https", info.Fleetd.URL, info.Fleetd.MetricsToken, http.StatusOK},
	} {
		if code, body := get(r.base, "/metrics/devices", r.token); code != r.want {
			t.Errorf("%s: GET /metrics/devices %d %.200s, want %d", r.name, code, body, r.want)
		}
	}
}

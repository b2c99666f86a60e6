package handlers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOperatorRoutesNeedTLS: with a TLS listener, the operator routes, the per-device metrics and
// /readyz asked with the operator token are refused on the plain listener (403 tls_required)
// before the token is looked at; over TLS they are served. What stays on the plain listener is served there: health,
// readiness without a token, the fleet-wide metrics and NetBox's webhooks (docs/operate.md,
// "Endpoints").
func TestOperatorRoutesNeedTLS(t *testing.T) {
	s := guardedServer(t, true, Limits{})
	plain := httptest.NewServer(s)
	defer plain.Close()
	secure := httptest.NewTLSServer(s)
	defer secure.Close()
	rows := []struct {
		name          string
		secure        bool
		method, path  string
		token         string
		want          int
		wantTLSRefuse bool
	}{
		{"refuse/the device list over plain HTTP, with the token", false, "GET", "/v1/devices", "t", 403, true},
		{"refuse/the device list over plain HTTP, without it", false, "GET", "/v1/devices", "", 403, true},
		{"refuse/a reconcile over plain HTTP", false, "POST", "/v1/devices/node-a/reconcile", "t", 403, true},
		{"refuse/the inventory over plain HTTP", false, "GET", "/v1/inventory", "t", 403, true},
		{"refuse/readyz with the operator token over plain HTTP", false, "GET", "/readyz", "t", 403, true},
		{"refuse/the per-device metrics over plain HTTP", false, "GET", "/metrics/devices", "m", 403, true},
		{"refuse/the per-device metrics over TLS without metrics.token_file: 404 not_configured", true, "GET", "/metrics/devices", "m", 404, false},
		{"ok/the device list over TLS", true, "GET", "/v1/devices", "t", 200, false},
		{"refuse/over TLS without the token: 401", true, "GET", "/v1/devices", "", 401, false},
		{"ok/readyz with the token over TLS", true, "GET", "/readyz", "t", 200, false},
		{"ok/readyz without a token over plain HTTP", false, "GET", "/readyz", "", 200, false},
		{"ok/health over plain HTTP", false, "GET", "/healthz", "", 200, false},
		{"ok/the fleet-wide metrics over plain HTTP", false, "GET", "/metrics", "", 200, false},
		{"ok/a webhook over plain HTTP reaches its check (unsigned: 401)", false, "POST", "/v1/netbox/webhook", "", 401, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			base, client := plain.URL, plain.Client()
			if r.secure {
				base, client = secure.URL, secure.Client()
			}
			req, _ := http.NewRequest(r.method, base+r.path, strings.NewReader("{}"))
			if r.token != "" {
				req.Header.Set("Authorization", "Bearer "+r.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			b := string(raw)
			if resp.StatusCode != r.want || strings.Contains(b, `"tls_required"`) != r.wantTLSRefuse {
				t.Errorf("%s %s: %d %s, want %d (tls_required %v)", r.method, r.path, resp.StatusCode, b, r.want, r.wantTLSRefuse)
			}
			if r.wantTLSRefuse && !strings.Contains(b, "public_url") {
				t.Errorf("the refusal does not say what to do: %s", b)
			}
		})
	}
}

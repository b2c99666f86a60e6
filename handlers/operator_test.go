package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/webhook"
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
		{"refuse/plan without token", "GET", "/v1/devices/node-a/plan", "", 401, nil},
		{"ok/plan of the request NetBox holds, before it is taken", "GET", "/v1/devices/node-a/plan", "op", 200, func(b map[string]any) bool {
			return b["action"] == "provision" && b["outcome"] == "accepted" && b["asked"] == false
		}},
		{"refuse/plan of an unknown action", "GET", "/v1/devices/node-a/plan?action=format", "op", 400, func(b map[string]any) bool { return b["error"] == "unknown_action" }},
		{"refuse/plan of an unknown device", "GET", "/v1/devices/nope/plan", "op", 404, func(b map[string]any) bool { return b["error"] == "unknown_device" }},
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
		if strings.HasPrefix(r.name, "refuse/reconcile") || strings.Contains(r.name, "plan") {
			if f.Inv.Get(12).Owned.State != "" || len(f.Inv.JournalOf(12)) != 0 {
				t.Fatalf("%s: the request was taken or journaled", r.name)
			}
		}
		if r.name == "refuse/reconcile without token changes nothing" && f.Inv.Get(12).Owned.State != "" {
			t.Fatalf("an unauthenticated reconcile took the request")
		}
	}
}

// TestOperatorGuessesAreLimited: every wrong or missing token takes one of the address's 10
// guesses; once they are spent the address is answered 429 before its token is looked at (the
// right one included), while another address still gets in (docs/security.md, "Operators → fleetd").
func TestOperatorGuessesAreLimited(t *testing.T) {
	f := handlerstest.New(t, handlerstest.Config{})
	get := func(from, token string) int {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		req, _ := http.NewRequest("GET", f.URL+"/v1/devices", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		return resp.StatusCode
	}
	if s := get("127.0.0.1", "op"); s != 200 {
		t.Fatalf("the right token: %d, want 200 (a right token takes no guess)", s)
	}
	for i := range 10 {
		if s := get("127.0.0.1", fmt.Sprintf("guess-%d", i)); s != 401 {
			t.Fatalf("guess %d: %d, want 401", i+1, s)
		}
	}
	for _, tok := range []string{"guess-10", "", "op"} {
		if s := get("127.0.0.1", tok); s != 429 {
			t.Errorf("token %q after 10 guesses: %d, want 429", tok, s)
		}
	}
	if s := get("127.0.0.3", "op"); s != 200 {
		t.Errorf("another address with the right token: %d, want 200", s)
	}
}

// TestReadyzTellsErrorsOnlyToOperators: a failed dependency is named to anyone, how it failed
// (here an error carrying NetBox's address) only to a caller with the operator token.
func TestReadyzTellsErrorsOnlyToOperators(t *testing.T) {
	f := handlerstest.New(t, handlerstest.Config{})
	intake, err := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: f.Service.Requests})
	if err != nil {
		t.Fatal(err)
	}
	const detail = "dial tcp netbox.lan:443: connection refused"
	h, err := handlers.New(handlers.Deps{Enrollment: f.Service.Enrollment, Delivery: f.Service.Delivery, BootChecks: f.Service.BootChecks, Requests: f.Service.Requests,
		Review: f.Service.Review, Views: f.Service.Views, Webhooks: intake, Gatherer: prometheus.NewRegistry(),
		OperatorToken: []byte("op"), Logger: zerolog.Nop(), Ready: []handlers.ReadyCheck{
			{Name: "netbox", Check: func(context.Context) error { return errors.New(detail) }},
			{Name: "kubernetes", Check: func(context.Context) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, r := range []struct {
		name, token string
		wantDetail  bool
	}{{"refuse/anyone: the name only", "", false}, {"refuse/a wrong token: the name only", "nope", false}, {"ok/the operator: the error too", "op", true}} {
		req, _ := http.NewRequest("GET", srv.URL+"/readyz", nil)
		if r.token != "" {
			req.Header.Set("Authorization", "Bearer "+r.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(b), `"netbox"`) || strings.Contains(string(b), `"kubernetes"`) {
			t.Errorf("%s: %d %s, want 503 naming netbox only", r.name, resp.StatusCode, b)
		}
		if strings.Contains(string(b), detail) != r.wantDetail {
			t.Errorf("%s: the answer %s the error: %s", r.name, map[bool]string{true: "lacks", false: "carries"}[r.wantDetail], b)
		}
	}
}

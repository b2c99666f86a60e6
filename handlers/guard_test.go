package handlers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/webhook"
)

func guardedServer(t *testing.T, tlsOnly bool, limits Limits) *Server {
	t.Helper()
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "https://spore"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(),
		Installer: fleettest.NewInstaller(), Clock: fleet.SystemClock{}, Random: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc.Requests})
	s, err := New(Deps{Enrollment: svc.Enrollment, Delivery: svc.Delivery, BootChecks: svc.BootChecks, Requests: svc.Requests,
		Review: svc.Review, Views: svc.Views, Webhooks: in, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("t"),
		Logger: zerolog.Nop(), NeedTLS: tlsOnly, NodeLimits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNodeRoutesNeedTLS(t *testing.T) {
	s := guardedServer(t, true, Limits{})
	plain := httptest.NewServer(s)
	defer plain.Close()
	secure := httptest.NewTLSServer(s)
	defer secure.Close()
	rows := []struct {
		name   string
		client *http.Client
		base   string
		path   string
		want   int
	}{
		{"refuse/enrollment over plain HTTP", plain.Client(), plain.URL, "/v1/attest/challenge", 403},
		{"refuse/configuration over plain HTTP", plain.Client(), plain.URL, "/v1/config/talos?uuid=x", 403},
		{"refuse/boot check over plain HTTP", plain.Client(), plain.URL, "/v1/boot-check", 403},
		{"ok/enrollment over TLS reaches the handler (empty body: 400)", secure.Client(), secure.URL, "/v1/attest/challenge", 400},
		{"ok/health over plain HTTP", plain.Client(), plain.URL, "/healthz", 200},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			method := "POST"
			if strings.HasPrefix(r.path, "/v1/config") || r.path == "/healthz" {
				method = "GET"
			}
			req, _ := http.NewRequest(method, r.base+r.path, strings.NewReader(""))
			resp, err := r.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != r.want {
				t.Fatalf("%s %s: %d, want %d", method, r.path, resp.StatusCode, r.want)
			}
		})
	}
}

func TestNodeRoutesRateLimited(t *testing.T) {
	s := guardedServer(t, false, Limits{PerMinute: 1, Burst: 3})
	srv := httptest.NewServer(s)
	defer srv.Close()
	codes := []int{}
	for i := 0; i < 5; i++ {
		resp, err := http.Get(srv.URL + "/v1/config/seed?uuid=x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	want := []int{404, 404, 404, 429, 429} // three in the burst reach fleetd (no such device), then the limit
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("codes %v, want %v", codes, want)
		}
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health check limited too: %v %v", resp.StatusCode, err)
	}
}

// TestEveryResponseHasARequestID: unknown routes and wrong methods too (docs/design.md §6).
func TestEveryResponseHasARequestID(t *testing.T) {
	srv := httptest.NewServer(guardedServer(t, false, Limits{}))
	defer srv.Close()
	for _, r := range []struct{ method, path string }{{"GET", "/nope"}, {"GET", "/v1/attest/challenge"}, {"GET", "/healthz"}, {"POST", "/v1/devices"}} {
		req, _ := http.NewRequest(r.method, srv.URL+r.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s (%d): no X-Request-Id", r.method, r.path, resp.StatusCode)
		}
	}
}

// TestNewRefusesAMissingUseCase: handlers wired without one of the domain's use cases refuse to
// start, naming what is missing, instead of answering its routes with a nil dereference.
func TestNewRefusesAMissingUseCase(t *testing.T) {
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "https://spore"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(),
		Installer: fleettest.NewInstaller(), Clock: fleet.SystemClock{}, Random: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc.Requests})
	full := func() Deps {
		return Deps{Enrollment: svc.Enrollment, Delivery: svc.Delivery, BootChecks: svc.BootChecks, Requests: svc.Requests,
			Review: svc.Review, Views: svc.Views, Webhooks: in, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("t")}
	}
	rows := []struct {
		name string
		drop func(*Deps)
		want string
	}{
		{"ok/every use case", func(*Deps) {}, ""},
		{"refuse/no enrollment", func(d *Deps) { d.Enrollment = nil }, "no Enrollment:"},
		{"refuse/no delivery", func(d *Deps) { d.Delivery = nil }, "no Delivery:"},
		{"refuse/no boot checks", func(d *Deps) { d.BootChecks = nil }, "no BootChecks:"},
		{"refuse/no requests", func(d *Deps) { d.Requests = nil }, "no Requests:"},
		{"refuse/no review", func(d *Deps) { d.Review = nil }, "no Review:"},
		{"refuse/no views and no delivery", func(d *Deps) { d.Views, d.Delivery = nil, nil }, "no Delivery, Views:"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := full()
			r.drop(&d)
			s, err := New(d)
			switch {
			case r.want == "" && err != nil:
				t.Fatalf("New = %v, want a server", err)
			case r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)):
				t.Fatalf("New = %v, want an error naming %q", err, r.want)
			case r.want != "" && s != nil:
				t.Fatal("New refused but returned a server")
			}
		})
	}
}

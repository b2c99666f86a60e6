package handlers

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/webhook"
)

// TestReadyzSharesOneProbe: 64 concurrent /readyz calls while NetBox is down cost one NetBox
// request and one Kubernetes request, and one "not ready" line in the log, not one each; a call
// within readyMaxAge of that probe is answered from it; the next probe after it asks again and
// logs nothing new while NetBox stays down, and "ready again" once when it is back. Before, every
// call asked both and logged a warning (finding 7).
func TestReadyzSharesOneProbe(t *testing.T) {
	var netboxCalls, kubeCalls atomic.Int64
	var netboxDown atomic.Bool
	netboxDown.Store(true)
	release := make(chan struct{})
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC).UnixNano())
	var logs bytes.Buffer
	var logMu sync.Mutex
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "https://spore"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(),
		Installer: fleettest.NewInstaller(), Clock: fleet.SystemClock{}, Random: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc.Requests})
	s, err := New(Deps{Enrollment: svc.Enrollment, Delivery: svc.Delivery, BootChecks: svc.BootChecks, Requests: svc.Requests,
		Review: svc.Review, Views: svc.Views, Webhooks: in, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("t"),
		Logger: zerolog.New(syncWriter{&logMu, &logs}), Now: func() time.Time { return time.Unix(0, now.Load()) },
		Ready: []ReadyCheck{
			{Name: "netbox", Check: func(context.Context) error {
				netboxCalls.Add(1)
				<-release // every caller arrives while the probe is under way
				if netboxDown.Load() {
					return errors.New("dial tcp netbox.lan:443: connection refused")
				}
				return nil
			}},
			{Name: "kubernetes", Check: func(context.Context) error { kubeCalls.Add(1); return nil }},
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	ask := func() int {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	lines := func(msg string) int {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Count(logs.String(), `"message":"`+msg+`"`)
	}

	// 64 at once: one probe.
	const callers = 64
	codes := make(chan int, callers)
	for range callers {
		go func() { codes <- ask() }()
	}
	for netboxCalls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the other callers arrive and wait for the probe
	close(release)
	for range callers {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Errorf("a caller got %d, want 503", c)
		}
	}
	if netboxCalls.Load() != 1 || kubeCalls.Load() != 1 {
		t.Errorf("%d concurrent calls asked NetBox %d and Kubernetes %d times, want once each", callers, netboxCalls.Load(), kubeCalls.Load())
	}
	if n := lines("not ready"); n != 1 {
		t.Errorf("%d \"not ready\" lines for one probe, want 1:\n%s", n, logs.String())
	}

	// Within readyMaxAge: answered from the same probe.
	now.Add(int64(readyMaxAge - time.Millisecond))
	if c := ask(); c != http.StatusServiceUnavailable || netboxCalls.Load() != 1 {
		t.Errorf("a call within readyMaxAge: %d after %d NetBox calls, want 503 from the one probe", c, netboxCalls.Load())
	}
	// Older: a new probe; NetBox still down logs nothing new.
	now.Add(int64(time.Millisecond))
	if c := ask(); c != http.StatusServiceUnavailable || netboxCalls.Load() != 2 || lines("not ready") != 1 {
		t.Errorf("a call after readyMaxAge: %d, %d NetBox calls, %d \"not ready\" lines; want 503, 2, 1", c, netboxCalls.Load(), lines("not ready"))
	}
	// NetBox back: ready, and one line says so.
	netboxDown.Store(false)
	now.Add(int64(readyMaxAge))
	if c := ask(); c != http.StatusOK || lines("ready again") != 1 {
		t.Errorf("NetBox back: %d, %d \"ready again\" lines; want 200, 1:\n%s", c, lines("ready again"), logs.String())
	}
}

// syncWriter serialises writes to a buffer shared with the test.
type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

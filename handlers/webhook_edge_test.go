package handlers

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/webhook"
)

// TestWebhookBodyTimeout: a webhook body that stops arriving is cut off at the intake's read
// timeout through the handlers' wrapping (the read deadline reaches the connection under it),
// answered 408 timeout, and its read slot freed.
func TestWebhookBodyTimeout(t *testing.T) {
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "https://spore"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(),
		Installer: fleettest.NewInstaller(), Clock: fleet.SystemClock{}, Random: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	in, err := webhook.New(webhook.Config{Secret: []byte("s"), BodyTimeout: 200 * time.Millisecond}, webhook.Deps{Reconciler: svc.Requests})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Deps{Enrollment: svc.Enrollment, Delivery: svc.Delivery, BootChecks: svc.BootChecks, Requests: svc.Requests,
		Review: svc.Review, Views: svc.Views, Webhooks: in, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("t"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/netbox/webhook HTTP/1.1\r\nHost: fleetd\r\nContent-Length: 1000\r\nX-Hook-Signature: %s\r\n\r\n{\"event\": ", strings.Repeat("0", 128))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled webhook body: %d, want 408", resp.StatusCode)
	}
}

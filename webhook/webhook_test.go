package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

const secret = "s3cret-webhook-key"

type recorder struct {
	mu  sync.Mutex
	ids []int64
	err error
}

func (r *recorder) Reconcile(_ context.Context, id int64) (fleet.Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	return fleet.Outcome{DeviceID: id, Result: "accepted"}, r.err
}

func sign(body []byte) string {
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// The bodies below follow NetBox's netbox/extras/webhooks.py send_webhook at each version's
// tag: python json.dumps separators, `model` up to 4.4, `object_type` from 4.4, `request` from
// 4.6, no username/request_id in 4.7.
var (
	body43          = `{"event": "updated", "timestamp": "2026-03-06T15:11:23.503186+00:00", "model": "device", "username": "admin", "request_id": "17af32f0-852d-4b3f-8c6e-7c5f9e0a0a11", "data": {"id": 12, "name": "node-a", "custom_fields": {"desired_action": "provision"}}, "snapshots": {"prechange": {"name": "node-a", "custom_fields": {}}, "postchange": {"name": "node-a", "custom_fields": {"desired_action": "provision"}}}}`
	body46          = `{"event": "updated", "timestamp": "2026-03-06T15:11:23.503186+00:00", "object_type": "dcim.device", "username": "admin", "request_id": "17af", "data": {"id": 12, "name": "node-a", "status": {"value": "planned", "label": "Planned"}}, "snapshots": {"prechange": {"status": "planned"}, "postchange": {"status": "planned"}}, "request": {"id": "17af", "method": "PATCH", "path": "/api/dcim/devices/12/", "user": "admin"}}`
	body47          = `{"event": "updated", "timestamp": "2026-03-06T15:11:23.503186+00:00", "object_type": "dcim.device", "data": {"id": 12}, "snapshots": {"prechange": {}, "postchange": {}}, "request": {"id": "17af", "method": "PATCH", "path": "/api/dcim/devices/12/", "user": "admin", "path_info": "/api/dcim/devices/12/", "GET": {}}}`
	echo            = `{"event": "updated", "timestamp": "t", "object_type": "dcim.device", "data": {"id": 12}, "snapshots": {"prechange": {"name": "node-a", "status": "planned", "custom_fields": {"desired_action": "provision", "fleet_class": "talos"}}, "postchange": {"name": "node-a", "status": "staged", "custom_fields": {"desired_action": null, "fleet_state": "pending", "fleet_class": "talos"}}}, "request": {"id": "r", "user": "fleetd"}}`
	echoOwnerChange = strings.Replace(echo, `"fleet_class": "talos"}}}`, `"fleet_class": "nixos"}}}`, 1)
	iface           = `{"event": "updated", "timestamp": "t", "object_type": "dcim.interface", "data": {"id": 40, "device": {"id": 12, "name": "node-a"}}, "request": {"id": "r", "user": "admin"}}`
	mac             = `{"event": "created", "timestamp": "t", "object_type": "dcim.macaddress", "data": {"id": 7, "mac_address": "AA:BB:CC:00:11:22", "assigned_object_type": "dcim.interface", "assigned_object": {"id": 40, "device": {"id": 12}}}, "request": {"id": "r", "user": "admin"}}`
	ipOrphan        = `{"event": "created", "timestamp": "t", "object_type": "ipam.ipaddress", "data": {"id": 9, "address": "10.0.0.5/24", "assigned_object_type": null, "assigned_object": null}, "request": {"id": "r", "user": "admin"}}`
	// An owner's request as NetBox sends it: full snapshots, name and address unchanged.
	ownerAsk     = `{"event": "updated", "timestamp": "t", "object_type": "dcim.device", "data": {"id": 12}, "snapshots": {"prechange": {"name": "node-a", "primary_ip4": 31, "status": "active", "custom_fields": {"desired_action": null}}, "postchange": {"name": "node-a", "primary_ip4": 31, "status": "active", "custom_fields": {"desired_action": "provision"}}}, "request": {"id": "r", "user": "admin"}}`
	ownerRename  = strings.Replace(ownerAsk, `"postchange": {"name": "node-a"`, `"postchange": {"name": "node-b"`, 1)
	ownerNewAddr = strings.Replace(ownerAsk, `"primary_ip4": 31, "status": "active", "custom_fields": {"desired_action": "provision"}`, `"primary_ip4": 32, "status": "active", "custom_fields": {"desired_action": "provision"}`, 1)
	deleted      = `{"event": "deleted", "timestamp": "t", "object_type": "dcim.device", "data": {"id": 12}, "snapshots": {"prechange": {}, "postchange": null}, "request": {"id": "r", "user": "admin"}}`
)

func TestWebhook(t *testing.T) {
	rows := []struct {
		name        string
		body        string
		sig         func(body []byte) string
		reconErr    error
		wantStatus  int
		wantIDs     []int64
		wantCode    string // error code or outcome
		wantInvHint bool
		wantWork    string // what the worker counts (fleetd_webhook_work_total)
	}{
		{name: "ok/NetBox 4.3 body (model, username)", body: body43, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/NetBox 4.6 body (object_type, request)", body: body46, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/NetBox 4.7 body (request only)", body: body47, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/interface change re-reads its device and hints the inventory", body: iface, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/MAC change re-reads the device of its interface", body: mac, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/fleetd's own echo needs no re-read", body: echo, wantStatus: 202, wantCode: "echo"},
		{name: "ok/fleetd user but an owner field changed: re-read", body: echoOwnerChange, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/an owner's request that leaves name and address refreshes no reservation", body: ownerAsk, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: false},
		{name: "ok/a renamed device refreshes the reservations", body: ownerRename, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/a device with a new primary address refreshes the reservations", body: ownerNewAddr, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/an address assigned to no device is ignored", body: ipOrphan, wantStatus: 202, wantCode: "ignored", wantInvHint: true},
		{name: "ok/a deleted device is ignored and refreshes the reservations", body: deleted, wantStatus: 202, wantCode: "ignored", wantInvHint: true},
		{name: "ok/Kubernetes failure is still accepted (reconcile completes it)", body: body46, reconErr: fmt.Errorf("create Workflow: connection refused"), wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "ok/NetBox unreachable: answered 202 when queued, the worker counts the failed re-read", body: body46, reconErr: fmt.Errorf("read device 12: %w: dial tcp: refused", fleet.ErrNetBoxUnavailable), wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true, wantWork: "netbox_unavailable"},
		{name: "refuse/no signature", body: body46, sig: func([]byte) string { return "" }, wantStatus: 401, wantCode: "bad_signature"},
		{name: "refuse/signature of other bytes", body: body46, sig: func(b []byte) string { return sign(append(b, ' ')) }, wantStatus: 401, wantCode: "bad_signature"},
		{name: "refuse/signature with sha512= prefix", body: body46, sig: func(b []byte) string { return "sha512=" + sign(b) }, wantStatus: 401, wantCode: "bad_signature"},
		{name: "ok/uppercase hex is still the same MAC", body: body46, sig: func(b []byte) string { return strings.ToUpper(sign(b)) }, wantStatus: 202, wantIDs: []int64{12}, wantCode: "accepted", wantInvHint: true},
		{name: "refuse/signed but not JSON", body: `{"event": "updated", "data": `, wantStatus: 400, wantCode: "malformed"},
		{name: "refuse/signed but data is not an object", body: `{"event": "updated", "object_type": "dcim.device", "data": [1]}`, wantStatus: 400, wantCode: "malformed"},
		{name: "refuse/too large", body: `{"event": "updated", "pad": "` + strings.Repeat("x", 2048) + `"}`, wantStatus: 413, wantCode: "too_large"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			rec := &recorder{err: r.reconErr}
			hints := 0
			reg := prometheus.NewRegistry()
			in, err := New(Config{Secret: []byte(secret), ServiceUser: "fleetd"},
				Deps{Reconciler: rec, RefreshReservations: func(context.Context) { hints++ }, Logger: zerolog.Nop(), Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			sig := sign([]byte(r.body))
			if r.sig != nil {
				sig = r.sig([]byte(r.body))
			}
			req := httptest.NewRequest("POST", "/v1/netbox/webhook/provision", bytes.NewBufferString(r.body))
			req.Header.Set("X-Hook-Signature", sig)
			w := httptest.NewRecorder()
			http.MaxBytesHandler(in.Handler("provision"), 1024).ServeHTTP(w, req) // the route table's cap, as handlers wraps it
			if w.Code != r.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, r.wantStatus, w.Body)
			}
			var resp map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("response is not JSON: %s", w.Body)
			}
			code := resp["error"] + resp["outcome"]
			if code != r.wantCode {
				t.Errorf("code/outcome %q, want %q (%s)", code, r.wantCode, w.Body)
			}
			if r.wantStatus >= 400 && r.wantStatus != 503 && resp["message"] == "" {
				t.Errorf("refusal without a message: %s", w.Body)
			}
			// The answer came before any work: the accepted event waits in the queue; a worker takes it.
			if len(rec.ids) != 0 {
				t.Errorf("reconciled %v before a worker took the event", rec.ids)
			}
			wantQueued := len(r.wantIDs)
			if len(in.jobs) != wantQueued {
				t.Fatalf("%d events queued, want %d", len(in.jobs), wantQueued)
			}
			if wantQueued > 0 {
				in.do(context.Background(), <-in.jobs)
				work := r.wantWork
				if work == "" {
					work = "decided"
				}
				if got := testutil.ToFloat64(in.work.WithLabelValues("provision", work)); got != 1 {
					t.Errorf("fleetd_webhook_work_total{route=provision,outcome=%s} = %v, want 1", work, got)
				}
			}
			if fmt.Sprint(rec.ids) != fmt.Sprint(r.wantIDs) {
				t.Errorf("reconciled %v, want %v", rec.ids, r.wantIDs)
			}
			if (hints > 0) != r.wantInvHint {
				t.Errorf("inventory hints %d, want hint %v", hints, r.wantInvHint)
			}
			outcome := r.wantCode
			if got := testutil.ToFloat64(in.results.WithLabelValues("provision", outcome)); got != 1 {
				t.Errorf("fleetd_webhooks_total{route=provision,outcome=%s} = %v, want 1", outcome, got)
			}
		})
	}
}

func TestNewRefusesNoSecret(t *testing.T) {
	if _, err := New(Config{}, Deps{Reconciler: &recorder{}}); err == nil || !strings.Contains(err.Error(), "webhook secret") {
		t.Fatalf("New without secret: %v, want an error naming the webhook secret", err)
	}
}

// blocker holds every reconcile until released, and says when one has started.
type blocker struct {
	entered chan int64
	release chan struct{}
}

func (b *blocker) Reconcile(ctx context.Context, id int64) (fleet.Outcome, error) {
	b.entered <- id
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return fleet.Outcome{DeviceID: id, Result: "accepted"}, nil
}

func post(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", "/v1/netbox/webhook/provision", bytes.NewBufferString(body))
	req.Header.Set("X-Hook-Signature", sign([]byte(body)))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestAnsweredBeforeTheWork: a signed webhook is answered 202 while its reconcile is still blocked
// in a worker: the answer never waits for NetBox or Kubernetes.
func TestAnsweredBeforeTheWork(t *testing.T) {
	b := &blocker{entered: make(chan int64, 1), release: make(chan struct{})}
	in, err := New(Config{Secret: []byte(secret), Workers: 1}, Deps{Reconciler: b, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	defer close(b.release)
	// The first webhook occupies the only worker, which blocks in its reconcile.
	answered := make(chan *httptest.ResponseRecorder, 2)
	go func() { answered <- post(t, in.Handler("provision"), body46) }()
	select {
	case w := <-answered:
		if w.Code != http.StatusAccepted {
			t.Fatalf("first webhook = %d %s, want 202", w.Code, w.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first webhook was not answered while its work was blocked: the answer waits for the work")
	}
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no worker took the queued webhook")
	}
	// With the worker blocked, the next one is still answered (a synchronous handler would hang
	// here until the release, which comes only after the answer).
	go func() { answered <- post(t, in.Handler("provision"), body43) }()
	select {
	case w := <-answered:
		if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), `"accepted"`) {
			t.Errorf("webhook while the worker is blocked = %d %s, want 202 accepted", w.Code, w.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook was not answered while its work was blocked: the answer waits for the work")
	}
}

// TestCoalesce: a second event for a device whose event still waits in the queue is answered 202
// coalesced and adds no decision (the waiting one reads NetBox, with the device's change log,
// after it); one that carries another user's write of fleetd's fields is coalesced the same way:
// its snapshots are never what fleetd puts back (a replayed or forged delivery's would be
// anyone's who can read the webhook secret), the waiting decision's read finds the write. Another
// device's event is queued. TestAnsweredBeforeTheWork shows that an event arriving once a worker
// took the device's event is queued again.
func TestCoalesce(t *testing.T) {
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	in, err := New(Config{Secret: []byte(secret), ServiceUser: "fleetd"}, Deps{Reconciler: rec, Logger: zerolog.Nop(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	foreign := strings.Replace(echo, `"user": "fleetd"`, `"user": "admin"`, 1) // admin wrote fleet_state
	for _, step := range []struct {
		name, route, body, want string
		queued                  int
	}{
		{"ok/the first event for node-a is queued", "provision", body46, `"accepted"`, 1},
		{"ok/the generic route's event for it is coalesced", "inventory", body43, `"coalesced"`, 1},
		{"ok/another user's write of fleetd's fields is coalesced too", "inventory", foreign, `"coalesced"`, 1},
		{"ok/another device's event is queued", "inventory", strings.Replace(body43, `"id": 12`, `"id": 13`, 1), `"accepted"`, 2},
	} {
		// No worker runs yet: every event stays in the queue.
		if w := post(t, in.Handler(step.route), step.body); w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), step.want) {
			t.Errorf("%s: %d %s, want 202 %s", step.name, w.Code, w.Body, step.want)
		}
		if len(in.jobs) != step.queued {
			t.Errorf("%s: %d events queued, want %d", step.name, len(in.jobs), step.queued)
		}
	}
	if got := testutil.ToFloat64(in.results.WithLabelValues("inventory", "coalesced")); got != 2 {
		t.Errorf("fleetd_webhooks_total{route=inventory,outcome=coalesced} = %v, want 2", got)
	}
	for len(in.jobs) > 0 {
		in.do(context.Background(), <-in.jobs)
	}
	if fmt.Sprint(rec.ids) != "[12 13]" {
		t.Errorf("decided %v, want [12 13]: node-a once for its three events, node-b once", rec.ids)
	}
	// Once taken, node-a's next event is queued again.
	if w := post(t, in.Handler("provision"), body46); !strings.Contains(w.Body.String(), `"accepted"`) {
		t.Errorf("an event after node-a's was decided: %d %s, want 202 accepted", w.Code, w.Body)
	}
}

// TestQueueFull: when the queue is full, a signed webhook is answered 503 queue_full with
// Retry-After (NetBox retries when RQ_RETRY_MAX is set; the periodic reconcile re-reads every
// device in any case), and the queued events are still done. A refused event leaves no mark: the
// device's next event is queued and decided, not coalesced into the one that was refused; and an
// event carrying another user's write of a device whose event waits is coalesced into it.
func TestQueueFull(t *testing.T) {
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	in, err := New(Config{Secret: []byte(secret), Queue: 1, ServiceUser: "fleetd"}, Deps{Reconciler: rec, Logger: zerolog.Nop(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	// No worker runs: the first event fills the queue.
	if w := post(t, in.Handler("provision"), body46); w.Code != http.StatusAccepted {
		t.Fatalf("first webhook = %d %s, want 202", w.Code, w.Body)
	}
	w := post(t, in.Handler("provision"), strings.Replace(body43, `"id": 12`, `"id": 13`, 1))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("webhook on a full queue = %d %s, want 503", w.Code, w.Body)
	}
	if got := w.Header().Get("Retry-After"); got != fmt.Sprint(RetryAfter) {
		t.Errorf("Retry-After = %q, want %d", got, RetryAfter)
	}
	var resp map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp["error"] != "queue_full" ||
		!strings.Contains(resp["message"], "reconcile") {
		t.Errorf("full-queue answer %s, want error queue_full and a message naming the reconcile", w.Body)
	}
	if got := testutil.ToFloat64(in.results.WithLabelValues("provision", "queue_full")); got != 1 {
		t.Errorf("fleetd_webhooks_total{outcome=queue_full} = %v, want 1", got)
	}
	// A bad signature is still refused as such, full queue or not.
	req := httptest.NewRequest("POST", "/v1/netbox/webhook/provision", bytes.NewBufferString(body46))
	req.Header.Set("X-Hook-Signature", sign([]byte(body43)))
	bad := httptest.NewRecorder()
	in.Handler("provision").ServeHTTP(bad, req)
	if bad.Code != http.StatusUnauthorized {
		t.Errorf("bad signature on a full queue = %d, want 401", bad.Code)
	}
	// Another user's write of node-a's fields, while node-a's event waits on the full queue, is
	// coalesced into that event like any other: its snapshots carry nothing fleetd puts back (the
	// waiting decision reads the device and its change log), so it needs no slot of its own.
	foreign := strings.Replace(echo, `"user": "fleetd"`, `"user": "admin"`, 1)
	if w := post(t, in.Handler("inventory"), foreign); w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), `"coalesced"`) {
		t.Fatalf("another user's write of node-a on a full queue = %d %s, want 202 coalesced into node-a's waiting event", w.Code, w.Body)
	}
	// The queued event is done once a worker runs.
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitReconciled(t, rec, "[12]")
	// node-b's event was refused, not queued: its next one is queued and decided.
	if w := post(t, in.Handler("provision"), strings.Replace(body43, `"id": 12`, `"id": 13`, 1)); w.Code != http.StatusAccepted ||
		!strings.Contains(w.Body.String(), `"accepted"`) {
		t.Fatalf("node-b's event after its refused one = %d %s, want 202 accepted (queued)", w.Code, w.Body)
	}
	waitReconciled(t, rec, "[12 13]")
}

// waitReconciled waits until the recorder has reconciled exactly the devices want lists.
func waitReconciled(t *testing.T, rec *recorder, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		rec.mu.Lock()
		got := fmt.Sprint(rec.ids)
		rec.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconciled %s, want %s", got, want)
		}
	}
}

package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/folly-infra/fleetd/dev/netboxemu"
)

// The faults fleetd must survive (docs/design.md §2, §6): forged and broken webhooks, unknown devices, duplicate
// and echoed deliveries, NetBox and Kubernetes unreachable, and a fleetd restart between the
// claim and the Workflow. These tests inject faults into shared parts (the emulator, the API
// server, fleetd), so they run one after the other, never in parallel with other tests.

// webhookBody is a NetBox 4.6 device webhook body for the device with id.
func webhookBody(t testing.TB, id int64, name string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"event": "updated", "timestamp": "2026-11-30T10:00:00.000000+00:00", "object_type": "dcim.device",
		"username": "admin", "request_id": "3f1c0c4e-0000-4000-8000-000000000001",
		"data":      map[string]any{"id": id, "name": name, "custom_fields": map[string]any{"desired_action": "provision"}},
		"snapshots": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sign(body []byte) string { return netboxemu.Sign(testStack.Info().WebhookSecret, body) }

// TestWebhookIntake: fleetd verifies the signature over the raw body before anything else,
// refuses what it cannot read, and accepts (queues, and its worker then ignores) an event for a
// device NetBox does not have.
func TestWebhookIntake(t *testing.T) {
	needStack(t)
	dev := "extra-008"
	id := testStack.DeviceID(dev)
	body := webhookBody(t, id, dev)
	tampered := []byte(strings.Replace(string(body), `"extra-008"`, `"extra-00X"`, 1))
	tests := []struct {
		name      string
		body      []byte
		signature string
		wantCode  int
		wantError string // the error code, or the outcome of a 202
	}{
		{"refuse/signed-with-another-secret", body, netboxemu.Sign("not-the-webhook-secret", body), http.StatusUnauthorized, "bad_signature"},
		{"refuse/no-signature", body, "", http.StatusUnauthorized, "bad_signature"},
		{"refuse/body-changed-after-signing", tampered, sign(body), http.StatusUnauthorized, "bad_signature"},
		{"refuse/signature-not-hex", body, "sha512=" + sign(body), http.StatusUnauthorized, "bad_signature"},
		{"refuse/malformed-json", []byte(`{"event": "updated", "data": {`), sign([]byte(`{"event": "updated", "data": {`)), http.StatusBadRequest, "malformed"},
		{"refuse/not-an-event", []byte(`[1, 2, 3]`), sign([]byte(`[1, 2, 3]`)), http.StatusBadRequest, "malformed"},
		{"ok/unknown-device-ignored", webhookBody(t, 987654, "nowhere"), sign(webhookBody(t, 987654, "nowhere")), http.StatusAccepted, "accepted"},
	}
	acceptedBefore := metric(t, "fleetd_webhooks_total", "route", "provision", "outcome", "accepted")
	refusedBefore := metric(t, "fleetd_webhooks_total", "route", "provision", "outcome", "bad_signature")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, answer := postWebhook(t, "/v1/netbox/webhook/provision", tc.body, tc.signature)
			if code != tc.wantCode || !strings.Contains(answer, `"`+tc.wantError+`"`) {
				t.Errorf("POST /v1/netbox/webhook/provision = %d %s, want %d with %q", code, answer, tc.wantCode, tc.wantError)
			}
		})
	}
	if got := metric(t, "fleetd_webhooks_total", "route", "provision", "outcome", "bad_signature") - refusedBefore; got != 4 {
		t.Errorf("fleetd counted %v webhooks with a bad signature, want 4", got)
	}
	if got := metric(t, "fleetd_webhooks_total", "route", "provision", "outcome", "accepted") - acceptedBefore; got != 1 {
		t.Errorf("fleetd accepted %v webhooks, want 1 (the unknown device's)", got)
	}
	d := device(t, dev)
	if d.Field("fleet_state") != "" || d.Field("fleet_request") != "" || len(journal(t, dev)) != 0 || len(deviceWorkflows(t, dev)) != 0 {
		t.Errorf("%s changed after forged webhooks: state %q request %q, %d journal entries, %d Workflows",
			dev, d.Field("fleet_state"), d.Field("fleet_request"), len(journal(t, dev)), len(deviceWorkflows(t, dev)))
	}
}

// TestDuplicateWebhooks: NetBox's webhook for one request, delivered 20 times at once (a replay
// of the exact signed delivery), makes exactly one claim and one Workflow.
func TestDuplicateWebhooks(t *testing.T) {
	needStack(t)
	dev := "extra-009"
	emu := testStack.NetBox()
	t.Cleanup(emu.Faults().Clear)
	// Hold NetBox's own delivery back, so that all 20 copies race each other.
	emu.Faults().AddDelivery(netboxemu.DeliveryFaultRule{Webhook: "fleetd-provision", Times: 1, Fault: netboxemu.DeliveryFault{Drop: true}})
	ask(t, dev, "provision")
	del := waitDelivery(t, dev, "fleetd-provision", func(d netboxemu.Delivery) bool { return d.Dropped })

	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(tctx(t), del.Method, del.URL, strings.NewReader(string(del.Body)))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header = del.Header.Clone()
			codes[i], _ = do(t, req)
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Errorf("copy %d answered %d, want 202", i, c)
		}
	}
	d := waitState(t, dev, "pending")
	runs := reconcileRuns(t)
	waitWorkflow(t, dev, d.Field("fleet_workflow"))
	waitReconciles(t, runs, 1) // a periodic reconcile after the storm adds nothing either
	assertOneRequest(t, dev)
}

// assertOneRequest checks that the device has exactly one Workflow, the one NetBox names, and
// one journal entry (the acceptance).
func assertOneRequest(t testing.TB, dev string) {
	t.Helper()
	d := device(t, dev)
	wfs := deviceWorkflows(t, dev)
	if len(wfs) != 1 || wfs[0].Name != d.Field("fleet_workflow") {
		names := make([]string, len(wfs))
		for i := range wfs {
			names[i] = wfs[i].Name
		}
		t.Errorf("Workflows of %s = %v, want exactly %q", dev, names, d.Field("fleet_workflow"))
	}
	j := waitJournal(t, dev, 1)
	if len(j) != 1 || !strings.Contains(j[0].Comments, "accepted") {
		t.Errorf("journal of %s = %+v, want exactly one acceptance", dev, j)
	}
}

// waitDelivery waits for a finished delivery of webhook about the device that satisfies ok.
func waitDelivery(t testing.TB, dev, webhook string, ok func(netboxemu.Delivery) bool) netboxemu.Delivery {
	t.Helper()
	id := testStack.DeviceID(dev)
	var found netboxemu.Delivery
	eventually(t, fmt.Sprintf("delivery of %s for %s", webhook, dev), func() (bool, string) {
		for _, d := range testStack.NetBox().Deliveries() {
			if d.ObjectID == id && d.Webhook == webhook && ok(d) {
				found = d
				return true, ""
			}
		}
		return false, "none yet"
	})
	return found
}

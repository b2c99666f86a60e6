package stack_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/fleet"
)

// TestEchoes: fleetd's own PATCHes come back as webhooks (a retirement keeps status
// decommissioning, so every write of fleetd matches the retire event rule). They are delivered,
// answered 202 "echo", and make no new work: one Workflow, one journal entry.
func TestEchoes(t *testing.T) {
	needStack(t)
	dev := "extra-010"
	echoesBefore := metric(t, "fleetd_webhooks_total", "route", "retire", "outcome", "echo")
	patch(t, dev, map[string]any{"status": "decommissioning"})
	d := waitState(t, dev, "pending")
	waitWorkflow(t, dev, d.Field("fleet_workflow"))
	echo := waitDelivery(t, dev, "fleetd-retire", func(d netboxemu.Delivery) bool { return d.User == "fleetd" })
	if echo.StatusCode != http.StatusAccepted || !echo.OK() {
		t.Errorf("fleetd's echo was answered %d (%s), want 202", echo.StatusCode, echo.Err)
	}
	if !strings.Contains(string(echo.Body), `"fleet_state": "pending"`) {
		t.Errorf("the echo's body does not carry fleetd's write (fleet_state pending): %s", echo.Body)
	}
	eventually(t, "fleetd counts the echo", func() (bool, string) {
		n := metric(t, "fleetd_webhooks_total", "route", "retire", "outcome", "echo") - echoesBefore
		return n >= 1, "echoes counted: " + ftoa(n)
	})
	runs := reconcileRuns(t)
	waitReconciles(t, runs, 1)
	assertOneRequest(t, dev)
}

// TestNetBoxUnreachable: while NetBox's REST API answers 503, a webhook is still answered 202 (it
// is queued before any re-read), its worker counts the failed re-read, and the owner's request waits; once NetBox answers again, the
// periodic reconcile takes it: a lost webhook delays a request but never loses it (docs/design.md §2).
func TestNetBoxUnreachable(t *testing.T) {
	needStack(t)
	dev := "extra-011"
	id := testStack.DeviceID(dev)
	emu := testStack.NetBox()
	t.Cleanup(emu.Faults().Clear)
	// Reads fail; the owner's PATCH still goes through.
	emu.Faults().AddAPI(netboxemu.APIFaultRule{Method: http.MethodGet, Fault: netboxemu.APIFault{Status: http.StatusServiceUnavailable}})
	failedBefore := metric(t, "fleetd_webhook_work_total", "route", "provision", "outcome", "netbox_unavailable")
	ask(t, dev, "provision")
	del := waitDelivery(t, dev, "fleetd-provision", func(netboxemu.Delivery) bool { return true })
	if del.StatusCode != http.StatusAccepted {
		t.Errorf("NetBox's delivery was answered %d (%s) while NetBox failed, want 202 (queued before any re-read)", del.StatusCode, del.Err)
	}
	// The second delivery is posted only once the first one's re-read has failed: posted while
	// that work still waits on NetBox's retries, it is coalesced into it (one re-read, not two).
	eventually(t, "the first delivery's worker counts its failed re-read", func() (bool, string) {
		n := metric(t, "fleetd_webhook_work_total", "route", "provision", "outcome", "netbox_unavailable") - failedBefore
		return n >= 1, "failed re-reads counted (NetBox's delivery's): " + ftoa(n)
	})
	code, answer := postWebhook(t, "/v1/netbox/webhook/provision", del.Body, del.Header.Get("X-Hook-Signature"))
	if code != http.StatusAccepted || !strings.Contains(answer, `"accepted"`) {
		t.Errorf("webhook while NetBox fails = %d %s, want 202 accepted (queued; the re-read fails later)", code, answer)
	}
	eventually(t, "the webhook's worker counts the failed re-read", func() (bool, string) {
		n := metric(t, "fleetd_webhook_work_total", "route", "provision", "outcome", "netbox_unavailable") - failedBefore
		return n >= 2, "failed re-reads counted (NetBox's delivery's and this one's): " + ftoa(n)
	})
	cf, err := emu.CustomFieldData(id)
	if err != nil {
		t.Fatal(err)
	}
	if cf["desired_action"] != "provision" || cf["fleet_state"] != nil {
		t.Errorf("while NetBox fails, NetBox has desired_action %v fleet_state %v; want the request untouched", cf["desired_action"], cf["fleet_state"])
	}
	emu.Faults().Clear()
	d := waitState(t, dev, "pending")
	waitWorkflow(t, dev, d.Field("fleet_workflow"))
	assertOneRequest(t, dev)
}

// TestKubernetesUnreachable: with the API server stopped, fleetd still claims the request in
// NetBox; it stays pending (never failed) through periodic reconciles, and its one Workflow is
// created once the API server is back on the same data. Meanwhile fleetd serves but is not
// ready: WaitFleetdServing returns (the chaos renew step waits for it after a cut, under a
// kube-stop of its schedule), WaitFleetdReady names Kubernetes.
func TestKubernetesUnreachable(t *testing.T) {
	needStack(t)
	dev := "extra-012"
	stopKube(t)
	if err := testStack.WaitFleetdServing(tctx(t)); err != nil {
		t.Errorf("WaitFleetdServing with the API server stopped: %v, want fleetd serving", err)
	}
	notReady, cancel := context.WithTimeout(tctx(t), 3*time.Second)
	err := testStack.WaitFleetdReady(notReady)
	cancel()
	if err == nil || !strings.Contains(err.Error(), `"kubernetes"`) {
		t.Errorf("WaitFleetdReady with the API server stopped: %v, want it to wait for Kubernetes", err)
	}
	ask(t, dev, "provision")
	waitState(t, dev, "pending")
	runs := reconcileRuns(t)
	waitReconciles(t, runs, 2)
	d := device(t, dev)
	if d.Field("fleet_state") != "pending" {
		t.Errorf("after reconciles without Kubernetes, fleet_state = %s (%s), want pending", d.Field("fleet_state"), d.Field("fleet_message"))
	}
	startKube(t)
	waitWorkflow(t, dev, d.Field("fleet_workflow"))
	assertOneRequest(t, dev)
	if d = device(t, dev); d.Field("fleet_state") != "pending" {
		t.Errorf("fleet_state = %s, want pending", d.Field("fleet_state"))
	}
}

// TestFleetdCrashBetweenClaimAndWorkflow: fleetd dies (SIGKILL) after the claim is in NetBox
// but before the Workflow exists (the API server is down meanwhile); the fleetd the supervisor
// starts again creates exactly one Workflow once Kubernetes is back.
func TestFleetdCrashBetweenClaimAndWorkflow(t *testing.T) {
	needStack(t)
	dev := "extra-013"
	stopKube(t)
	ask(t, dev, "provision")
	d := waitState(t, dev, "pending")
	pid, err := testStack.KillFleetd(syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	newPID, err := testStack.WaitNewFleetd(tctx(t), pid)
	if err != nil {
		t.Fatal(err)
	}
	startKube(t)
	if err := testStack.WaitFleetdReady(tctx(t)); err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, dev, d.Field("fleet_workflow"))
	assertOneRequest(t, dev)
	if testStack.FleetdPID() != newPID {
		t.Errorf("fleetd pid %d, want %d (restarted once)", testStack.FleetdPID(), newPID)
	}
}

// TestRestartFleetd: `fleetsim restart fleetd` (SIGTERM, the supervisor starts a new fleetd)
// gives a new, ready process that continues from NetBox.
func TestRestartFleetd(t *testing.T) {
	needStack(t)
	done, err := testStack.RestartFleetd(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].NewPID == done[0].OldPID || done[0].NewPID != testStack.FleetdPID() {
		t.Errorf("restart: %+v, supervised pid %d", done, testStack.FleetdPID())
	}
	code, _ := postWebhook(t, "/v1/netbox/webhook", webhookBody(t, 987654, "nowhere"), sign(webhookBody(t, 987654, "nowhere")))
	if code != http.StatusAccepted {
		t.Errorf("the restarted fleetd answered a webhook %d, want 202", code)
	}
}

// TestRestartBetweenNetbootAndBoot: a fleetd restart between a provision's netboot and the node's
// first boot is invisible to the node (docs/design.md §9): the new process renders the
// configuration from NetBox when the node fetches it, the device becomes active, and the node
// has the LAK files of the request it attested for.
func TestRestartBetweenNetbootAndBoot(t *testing.T) {
	needStack(t)
	name := "life-restart"
	installed(t, name)
	before := device(t, name)
	if _, err := testStack.RestartFleetd(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := step(t, stack.Boot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("boot after the restart: %v", err)
	}
	d := waitState(t, name, "active")
	if d.Field("fleet_request") != before.Field("fleet_request") || d.StatusValue() != "active" {
		t.Errorf("after the boot: request %q status %q, want %q active", d.Field("fleet_request"), d.StatusValue(), before.Field("fleet_request"))
	}
	lak := readFile(t, filepath.Join(testStack.Info().Machines[name].Dir, "disk", fleet.NodeDir, fleet.NodeFileLAKCert))
	if !strings.Contains(lak, "BEGIN CERTIFICATE") {
		t.Errorf("the node's lak.pem after the restart: %.80q", lak)
	}
	if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err != nil {
		t.Errorf("the node's first boot check with the files the restarted fleetd delivered: %v", err)
	}
}

func stopKube(t *testing.T) {
	t.Helper()
	if err := testStack.StopKube(); err != nil {
		t.Fatalf("stop the API server: %v", err)
	}
	t.Cleanup(func() { startKube(t) })
}

func startKube(t testing.TB) {
	t.Helper()
	if err := testStack.StartKube(tctx(t)); err != nil {
		t.Fatalf("start the API server again: %v", err)
	}
}

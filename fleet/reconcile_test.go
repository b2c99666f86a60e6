package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

func TestReconcileClaims(t *testing.T) {
	ctx := context.Background()
	type row struct {
		name        string
		device      func(fleet.Device) fleet.Device
		wantState   fleet.State
		wantStatus  fleet.Status
		wantCreates int
		wantJournal string // substring of the one journal entry expected
		wantMessage string // substring of fleet_message
	}
	rows := []row{
		{name: "ok/provision accepted: pending, staged, Workflow created, desired_action cleared",
			device:    func(d fleet.Device) fleet.Device { d.Declared.DesiredAction = fleet.ActionProvision; return d },
			wantState: fleet.StatePending, wantStatus: fleet.StatusStaged, wantCreates: 1,
			wantJournal: "info: provision accepted as request provision-", wantMessage: "from Template talos-install"},
		{name: "ok/wipe accepted with its own Template",
			device:    func(d fleet.Device) fleet.Device { d.Declared.DesiredAction = fleet.ActionWipe; return d },
			wantState: fleet.StatePending, wantStatus: fleet.StatusPlanned, wantCreates: 1,
			wantJournal: "info: wipe accepted", wantMessage: "Template fleet-wipe"},
		{name: "ok/decommissioning starts a retirement",
			device: func(d fleet.Device) fleet.Device {
				d.Status = fleet.StatusDecommissioning
				d.Owned.State = fleet.StateActive
				return d
			},
			wantState: fleet.StatePending, wantStatus: fleet.StatusDecommissioning, wantCreates: 1,
			wantJournal: "info: retire accepted", wantMessage: "Template fleet-retire"},
		{name: "ok/wipe on a decommissioning device retries the retirement",
			device: func(d fleet.Device) fleet.Device {
				d.Status, d.Owned.State, d.Owned.Request = fleet.StatusDecommissioning, fleet.StateFailed, "retire-aaaaaaaa"
				d.Declared.DesiredAction = fleet.ActionWipe
				return d
			},
			wantState: fleet.StatePending, wantStatus: fleet.StatusDecommissioning, wantCreates: 1, wantJournal: "info: retire accepted"},
		{name: "ok/a failed retirement is not retried on its own",
			device: func(d fleet.Device) fleet.Device {
				d.Status, d.Owned.State, d.Owned.Request = fleet.StatusDecommissioning, fleet.StateFailed, "retire-aaaaaaaa"
				return d
			},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusDecommissioning},
		{name: "ok/nothing requested: nothing written",
			device:    func(d fleet.Device) fleet.Device { return d },
			wantState: fleet.StateNone, wantStatus: fleet.StatusPlanned},
		{name: "refuse/no disk serial",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.DiskSerial = ""
				return d
			},
			wantState: fleet.StateRejected, wantStatus: fleet.StatusPlanned,
			wantJournal: "warning: provision refused: disk_serial is empty", wantMessage: "disk_serial is empty"},
		{name: "refuse/unknown class names the known ones",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.Class = "nope"
				return d
			},
			wantState: fleet.StateRejected, wantStatus: fleet.StatusPlanned,
			wantJournal: `fleet_class "nope" is not in classes.json (known: talos-member, talos-worker, worker-g2)`},
		{name: "refuse/worker-g2 with its reason",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.Class = "worker-g2"
				return d
			},
			wantState: fleet.StateRejected, wantJournal: "class worker-g2 cannot be installed: G2 boards have no TPM 2.0"},
		{name: "refuse/TPM 1.2 declared",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.TPM = fleet.TPM12
				return d
			},
			wantState: fleet.StateRejected, wantJournal: "tpm is 1.2"},
		{name: "refuse/no MAC",
			device:    func(d fleet.Device) fleet.Device { d.Declared.DesiredAction = fleet.ActionWipe; d.MACs = nil; return d },
			wantState: fleet.StateRejected, wantJournal: "no MAC address"},
		{name: "refuse/no EK hash",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.EKHashes = nil
				return d
			},
			wantState: fleet.StateRejected, wantJournal: "ek_sha256 is empty"},
		{name: "refuse/malformed EK hash",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.EKHashes = []string{"abc"}
				return d
			},
			wantState: fleet.StateRejected, wantJournal: `ek_sha256 entry "abc" is not a hex SHA-256`},
		{name: "refuse/every problem is listed at once",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction = fleet.ActionProvision
				d.Declared.DiskSerial, d.Declared.EKHashes, d.MACs = "", nil, nil
				return d
			},
			wantState: fleet.StateRejected, wantJournal: "disk_serial is empty: declare the serial of the one disk that may be wiped and installed; the device has no MAC address"},
		{name: "refuse/attest on a device that is not active",
			device:    func(d fleet.Device) fleet.Device { d.Declared.DesiredAction = fleet.ActionAttest; return d },
			wantState: fleet.StateRejected, wantJournal: "attest re-proves a running node, but the device status is planned"},
		{name: "refuse/provision on a decommissioning device",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction, d.Status, d.Owned.Request = fleet.ActionProvision, fleet.StatusDecommissioning, "retire-aaaaaaaa"
				d.Owned.State = fleet.StateRetired
				return d
			},
			wantState: fleet.StateRejected, wantStatus: fleet.StatusDecommissioning, wantJournal: "set its status back to planned"},
		{name: "ok/a request waits while another runs, and the journal says so",
			device: func(d fleet.Device) fleet.Device {
				d.Declared.DesiredAction, d.Owned.State = fleet.ActionProvision, fleet.StateWiping
				d.Owned.Request, d.Owned.Workflow = "wipe-aaaaaaaa", "node-a-wipe-aaaaaaaa"
				return d
			},
			wantState: fleet.StateWiping, wantStatus: fleet.StatusPlanned,
			wantJournal: "info: provision waits for wipe request wipe-aaaaaaaa (fleet_state wiping): it starts when that request ends; clear desired_action to cancel it"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := r.device(fleettest.Declared(12, "node-a"))
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			if d.Owned.Workflow != "" {
				inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowRunning})
			}
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState {
				t.Errorf("fleet_state %q, want %q (message %q)", got.Owned.State, r.wantState, got.Owned.Message)
			}
			if r.wantStatus != "" && got.Status != r.wantStatus {
				t.Errorf("status %q, want %q", got.Status, r.wantStatus)
			}
			if inst.Creates() != r.wantCreates {
				t.Errorf("%d Workflows created, want %d", inst.Creates(), r.wantCreates)
			}
			j := inv.JournalOf(12)
			switch {
			case r.wantJournal == "" && len(j) > 0:
				t.Errorf("journal %q, want none", j)
			case r.wantJournal != "" && (len(j) != 1 || !strings.Contains(j[0], r.wantJournal)):
				t.Errorf("journal %q, want one entry containing %q", j, r.wantJournal)
			}
			if !strings.Contains(got.Owned.Message, r.wantMessage) {
				t.Errorf("fleet_message %q, want it to contain %q", got.Owned.Message, r.wantMessage)
			}
			if r.wantState == fleet.StatePending || r.wantState == fleet.StateRejected {
				if got.Declared.DesiredAction != fleet.ActionNone {
					t.Errorf("desired_action %q left set after the request was taken", got.Declared.DesiredAction)
				}
			}
			if r.wantCreates == 1 {
				spec := inst.Spec(got.Owned.Workflow)
				if spec.Request != got.Owned.Request || spec.Name != fleet.WorkflowName("node-a", got.Owned.Request) {
					t.Errorf("Workflow %+v does not carry the claimed request %q", spec, got.Owned.Request)
				}
				if spec.Device.PrimaryMAC() == "" || spec.Device.PrimaryMAC() != got.PrimaryMAC() {
					t.Errorf("Workflow for MAC %q, want the device's %q (Tinkerbell finds the machine by it)", spec.Device.PrimaryMAC(), got.PrimaryMAC())
				}
			}
			// A second reconcile finds nothing left to do.
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			if n := len(inv.JournalOf(12)); n != len(j) || inst.Creates() != r.wantCreates {
				t.Errorf("second reconcile wrote %d more journal entries / %d Workflows", n-len(j), inst.Creates()-r.wantCreates)
			}
		})
	}
}

// TestConcurrentTriggersCreateOneWorkflow: 20 concurrent triggers for one request (duplicate
// webhooks, the reconcile, an operator) claim it once and create one Workflow.
func TestConcurrentTriggersCreateOneWorkflow(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionProvision
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	s := newTestService(inv, inst)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if inst.Creates() != 1 {
		t.Fatalf("%d Workflows created, want 1", inst.Creates())
	}
	if n := len(inv.JournalOf(12)); n != 1 {
		t.Fatalf("%d journal entries, want 1: %q", n, inv.JournalOf(12))
	}
}

// TestClaimConflict: when the device changes between read and claim (412), the claim is redone
// on the new version, and the owner's concurrent change is kept.
func TestClaimConflict(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionProvision
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	inv.ConflictOnce[12] = func(d *fleet.Device) { d.Declared.DiskSerial = "S-NEW" }
	s := newTestService(inv, inst)
	if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	got := inv.Get(12)
	if got.Owned.State != fleet.StatePending || inst.Creates() != 1 {
		t.Fatalf("state %q, %d Workflows; want pending and 1", got.Owned.State, inst.Creates())
	}
	if spec := inst.Spec(got.Owned.Workflow); spec.Device.Declared.DiskSerial != "S-NEW" {
		t.Errorf("Workflow made from disk serial %q, want the owner's new S-NEW", spec.Device.Declared.DiskSerial)
	}
}

// TestInstallDeferredThenCompleted: the Kubernetes API is down at claim time; the request stays
// pending (recorded in NetBox) and the next reconcile creates its Workflow — the same path that
// completes a request after a fleetd crash between claim and Workflow creation.
func TestInstallDeferredThenCompleted(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionProvision
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	inst.Fail = fmt.Errorf("dial tcp 127.0.0.1:6443: connection refused")
	s := newTestService(inv, inst)
	if _, err := s.Requests.Reconcile(context.Background(), 12); err == nil {
		t.Fatal("Reconcile with the API down: no error")
	}
	got := inv.Get(12)
	if got.Owned.State != fleet.StatePending || got.Owned.Workflow == "" || inst.Creates() != 0 {
		t.Fatalf("after a failed create: state %q workflow %q creates %d", got.Owned.State, got.Owned.Workflow, inst.Creates())
	}
	inst.Fail = nil
	if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	if inst.Creates() != 1 || inst.Spec(got.Owned.Workflow).Request != got.Owned.Request {
		t.Fatalf("after the API returned: %d creates of %v, want 1 of %s", inst.Creates(), "(specs)", got.Owned.Workflow)
	}
	if n := len(inv.JournalOf(12)); n != 1 {
		t.Errorf("journal %q, want only the acceptance", inv.JournalOf(12))
	}
}

// TestTemplateRefusalFailsRequest: a Template fleetd cannot use fails the request at once with the
// installer's reason, and nothing runs.
func TestTemplateRefusalFailsRequest(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionWipe
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	inst.Fail = fmt.Errorf("Template fleet-wipe: action wipe-disk has timeout 0: %w", fleet.ErrTemplate)
	s := newTestService(inv, inst)
	if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	got := inv.Get(12)
	if got.Owned.State != fleet.StateFailed || got.Status != fleet.StatusFailed {
		t.Fatalf("state %q status %q, want failed/failed", got.Owned.State, got.Status)
	}
	if !strings.Contains(got.Owned.Message, "timeout 0") {
		t.Errorf("message %q does not say why", got.Owned.Message)
	}
}

// TestReconcileAllReportsFailures: a periodic reconcile that could not read NetBox's change log
// says so in its error and counts itself an error (fleetd_reconcile_runs_total{result="error"});
// one that read everything counts itself ok.
func TestReconcileAllReportsFailures(t *testing.T) {
	for _, r := range []struct {
		name    string
		log     *fleettest.ChangeLog
		wantErr string // "" = none
		result  string
	}{
		{"ok/everything read", &fleettest.ChangeLog{}, "", "ok"},
		{"refuse/the change log unreadable", &fleettest.ChangeLog{Err: errors.New("GET /api/core/object-changes/: 502")}, "read NetBox's change log since", "error"},
	} {
		t.Run(r.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clock := fleettest.NewClock(testEpoch)
			inv := fleettest.NewNetBox(fleettest.Declared(1, "node-a"))
			inv.Clock = clock
			s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: fleettest.ServiceUser},
				fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, ChangeLog: r.log, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(),
					Clock: clock, Renderer: sharedRenderer(), Random: strings.NewReader(strings.Repeat("r", 4096)), Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			devices, err := s.Requests.ReconcileAll(context.Background())
			if r.wantErr == "" && err != nil || r.wantErr != "" && (err == nil || !strings.Contains(err.Error(), r.wantErr)) {
				t.Errorf("ReconcileAll: %v, want %q", err, r.wantErr)
			}
			if len(devices) != 1 {
				t.Errorf("the listing: %d devices, want node-a (a failed change-log read leaves the listing whole)", len(devices))
			}
			other := map[string]string{"ok": "error", "error": "ok"}[r.result]
			if n, m := gauge(t, reg, "fleetd_reconcile_runs_total", r.result), gauge(t, reg, "fleetd_reconcile_runs_total", other); n != 1 || m > 0 {
				t.Errorf("fleetd_reconcile_runs_total: %s %v, %s %v; want 1 and none", r.result, n, other, m)
			}
		})
	}
}

// TestRetirementStillRejected: a retirement (status decommissioning: no desired_action to clear)
// that the declaration cannot carry is rejected once; reconciles after it, while the reasons stay
// the same, write nothing and journal nothing again. A new reason is written.
func TestRetirementStillRejected(t *testing.T) {
	d := fleettest.Declared(1, "node-a")
	d.Status, d.Owned.State, d.MACs = fleet.StatusDecommissioning, fleet.StateActive, nil
	inv := fleettest.NewNetBox(d)
	s := newTestService(inv, fleettest.NewInstaller())
	for i, step := range []struct {
		name            string
		edit            func(*fleet.Device)
		result, message string
		saves, journal  int // the device's saves and journal entries after the step
	}{
		{"refuse/rejected: written once", nil, "rejected", "no MAC address", 1, 1},
		{"refuse/still rejected for the same reason: nothing written", nil, "still-rejected", "no MAC address", 1, 1},
		{"refuse/again: nothing written", nil, "still-rejected", "no MAC address", 1, 1},
		{"refuse/a new reason: written", func(d *fleet.Device) { d.Declared.DiskSerial = "" }, "rejected", "disk_serial is empty", 3, 2},
	} {
		if step.edit != nil {
			inv.WriteAs(fleettest.Owner, 1, step.edit)
		}
		out, err := s.Requests.Reconcile(context.Background(), 1)
		got := inv.Get(1)
		if err != nil || out.Result != step.result || got.Owned.State != fleet.StateRejected || !strings.Contains(got.Owned.Message, step.message) ||
			len(inv.Changes(1)) != step.saves || len(inv.JournalOf(1)) != step.journal {
			t.Fatalf("step %d, %s: %s, %v; state %s, message %q, %d saves, journal %q", i, step.name, out.Result, err, got.Owned.State,
				got.Owned.Message, len(inv.Changes(1)), inv.JournalOf(1))
		}
	}
}

package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

func TestFollowWorkflow(t *testing.T) {
	type row struct {
		name        string
		state       fleet.State
		request     string
		ws          *fleet.WorkflowStatus // nil: the Workflow does not exist
		wantState   fleet.State
		wantStatus  fleet.Status
		wantMessage string
		wantJournal string
		wantCerts   bool // serials kept
		attested    bool // the attestation recorded the identity its configuration carries
		expired     bool // the clock passes the configuration's TTL first
	}
	rows := []row{
		{name: "ok/install succeeded: configuring", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged,
			wantMessage: "reboots into it", wantJournal: "info: Workflow node-a-provision-aaaaaaaa succeeded", wantCerts: true},
		{name: "ok/still running: nothing written", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "stream-image"}, wantState: fleet.StateInstalling,
			wantStatus: fleet.StatusStaged, wantCerts: true, attested: true},
		{name: "refuse/running install attested by an older fleetd (no identity in NetBox): lost", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "stream-image"}, wantState: fleet.StateFailed,
			wantStatus: fleet.StatusFailed, wantCerts: true, wantMessage: "rendered by an older fleetd that kept configurations in memory", wantJournal: "danger:"},
		{name: "refuse/configuring node never fetched in time: expired", state: fleet.StateConfiguring, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true,
			attested: true, expired: true, wantMessage: "did not fetch its configuration before it expired", wantJournal: "danger:"},
		{name: "ok/configuring, configuration waiting: nothing written", state: fleet.StateConfiguring, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged, wantCerts: true, attested: true},
		// A wipe is recorded wiped (retired) on its receipt (TestWipeReceipt); a Workflow that
		// succeeds while the device is still wiping had none recorded.
		{name: "refuse/wipe succeeded with no receipt: unconfirmed, failed, certificates forgotten", state: fleet.StateWiping, request: "wipe-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateUnconfirmed, wantStatus: fleet.StatusFailed,
			wantMessage: "wipe request wipe-aaaaaaaa unconfirmed: Workflow node-a-wipe-aaaaaaaa was reported successful with no receipt from the machine's TPM, so the erase of disk S4EWNX0R123456 is not confirmed",
			wantJournal: "danger: wipe request wipe-aaaaaaaa unconfirmed"},
		{name: "refuse/retirement succeeded with no receipt: unconfirmed, status kept", state: fleet.StateWiping, request: "retire-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateUnconfirmed, wantStatus: fleet.StatusStaged,
			wantMessage: "To retire it, set desired_action=wipe on the decommissioning device.", wantJournal: "danger: retire request retire-aaaaaaaa unconfirmed"},
		{name: "ok/wipe's Workflow succeeded after its receipt: nothing written", state: fleet.StateWiped, request: "wipe-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateWiped, wantStatus: fleet.StatusStaged, wantCerts: true},
		{name: "refuse/failed action named with its message", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "stream-image", Message: "HTTP 404 fetching image"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true,
			wantMessage: "Workflow node-a-provision-aaaaaaaa failed at action stream-image: HTTP 404 fetching image",
			wantJournal: "danger: provision request provision-aaaaaaaa failed"},
		{name: "refuse/failed retirement says how to retry it", state: fleet.StateWiping, request: "retire-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "wipe-disk", Message: "2 disks have serial S4EWNX0R123456"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusStaged, wantCerts: true,
			wantMessage: "To retry the retirement, set desired_action=wipe on the decommissioning device.", wantJournal: "danger: retire request"},
		{name: "refuse/failed provision says how to ask again", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "write-image", Message: "404"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true,
			wantMessage: "To try again, fix the cause and set desired_action=provision.", wantJournal: "danger:"},
		{name: "refuse/failed action without a message says where its output is", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "write-image"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true,
			wantMessage: "failed at action write-image (Tinkerbell keeps no action output: it is in the log of the machine's worker, tink-agent or tink-worker).", wantJournal: "danger:"},
		{name: "refuse/timed out", state: fleet.StateWiping, request: "wipe-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowTimedOut, FailedAction: "wipe-disk"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true, wantMessage: "timed-out at action wipe-disk", wantJournal: "danger:"},
		{name: "refuse/succeeded without attestation", state: fleet.StatePending, request: "provision-aaaaaaaa",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true,
			wantMessage: "never attested", wantJournal: "danger:"},
		{name: "refuse/the agent failed: Workflow failed while pending", state: fleet.StatePending, request: "provision-aaaaaaaa",
			ws:        &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "fleetd-enroll", Message: "refused: unknown EK"},
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true, wantMessage: "fleetd-enroll: refused: unknown EK", wantJournal: "danger:"},
		{name: "refuse/Workflow deleted under a running request", state: fleet.StateInstalling, request: "provision-aaaaaaaa",
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true, wantMessage: "no longer exists in Kubernetes, and it had not ended", wantJournal: "danger:"},
		{name: "refuse/Workflow deleted under a running wipe", state: fleet.StateWiping, request: "wipe-aaaaaaaa",
			wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantCerts: true, wantMessage: "no longer exists in Kubernetes", wantJournal: "danger:"},
		{name: "ok/configuring: its Workflow pruned after it succeeded is no event", state: fleet.StateConfiguring, request: "provision-aaaaaaaa",
			wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged, wantCerts: true, attested: true},
		{name: "ok/pending request whose Workflow was never created gets it", state: fleet.StatePending, request: "provision-aaaaaaaa",
			wantState: fleet.StatePending, wantStatus: fleet.StatusStaged, wantCerts: true},
		{name: "refuse/a request id fleetd did not make", state: fleet.StateInstalling, request: "by-hand",
			ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowRunning}, wantState: fleet.StateFailed, wantCerts: true, wantMessage: "names no request fleetd made", wantJournal: "danger:"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status = fleet.StatusStaged
			d.Owned = fleet.Owned{State: r.state, Request: r.request, Workflow: fleet.WorkflowName("node-a", r.request),
				LDevIDSerial: "0a1b", LAKSerial: "0c2d"}
			if r.attested {
				d = attested(d)
			}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			if r.ws != nil {
				inst.Set(d.Owned.Workflow, *r.ws)
			}
			s := newTestService(inv, inst)
			if r.expired {
				s.clock.Advance(2 * time.Hour)
			}
			if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState || (r.wantStatus != "" && got.Status != r.wantStatus) {
				t.Errorf("state %q status %q, want %q %q (message %q)", got.Owned.State, got.Status, r.wantState, r.wantStatus, got.Owned.Message)
			}
			if !strings.Contains(got.Owned.Message, r.wantMessage) {
				t.Errorf("message %q, want it to contain %q", got.Owned.Message, r.wantMessage)
			}
			j := inv.JournalOf(12)
			if r.wantJournal == "" && len(j) != 0 || r.wantJournal != "" && (len(j) != 1 || !strings.Contains(j[0], r.wantJournal)) {
				t.Errorf("journal %q, want %q", j, r.wantJournal)
			}
			if kept := got.Owned.LAKSerial != "" && got.Owned.LDevIDSerial != ""; kept != r.wantCerts {
				t.Errorf("certificate serials kept = %v, want %v", kept, r.wantCerts)
			}
			if r.ws == nil && r.state == fleet.StatePending && inst.Creates() != 1 {
				t.Errorf("%d Workflows created for the pending request, want 1", inst.Creates())
			}
		})
	}
}

// TestMissingWorkflowBehind: an instance running behind the device reads it installing while
// another instance recorded the NoCloud delivery (active) and the ended Workflow was pruned since:
// its missing Workflow, judged again on the device as NetBox has it when the write meets the
// conflict, fails nothing. A Workflow's failure still does (the install did not finish).
func TestMissingWorkflowBehind(t *testing.T) {
	for _, r := range []struct {
		name      string
		ws        *fleet.WorkflowStatus // nil: missing
		wantState fleet.State
	}{
		{name: "ok/missing after the delivery: the active device stays active", wantState: fleet.StateActive},
		{name: "refuse/failed after the delivery: the install did not finish", ws: &fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "reboot"},
			wantState: fleet.StateFailed},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := attested(fleettest.Declared(12, "node-a"))
			d.Status = fleet.StatusStaged
			d.Owned = fleet.Owned{State: fleet.StateInstalling, Request: "provision-aaaaaaaa", Workflow: fleet.WorkflowName("node-a", "provision-aaaaaaaa"),
				LDevIDSerial: "0a1b", LAKSerial: "0c2d"}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			if r.ws != nil {
				inst.Set(d.Owned.Workflow, *r.ws)
			}
			inv.ConflictOnce[12] = func(d *fleet.Device) { d.Owned.State, d.Status = fleet.StateActive, fleet.StatusActive }
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
				t.Fatal(err)
			}
			if got := inv.Get(12); got.Owned.State != r.wantState {
				t.Errorf("state %q (message %q), want %q", got.Owned.State, got.Owned.Message, r.wantState)
			}
		})
	}
}

// TestWorkflowChangedIgnoresOldWorkflows: a watch event for a Workflow that is not the device's
// current one (an older request's) changes nothing.
func TestWorkflowChangedIgnoresOldWorkflows(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Owned = fleet.Owned{State: fleet.StateInstalling, Request: "provision-bbbbbbbb", Workflow: "node-a-provision-bbbbbbbb"}
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	s := newTestService(inv, inst)
	old := fleet.WorkflowStatus{Name: "node-a-provision-aaaaaaaa", Phase: fleet.WorkflowFailed}
	if _, err := s.Requests.WorkflowChanged(context.Background(), 12, old); err != nil {
		t.Fatal(err)
	}
	if got := inv.Get(12); got.Owned.State != fleet.StateInstalling || len(inv.JournalOf(12)) != 0 {
		t.Fatalf("old Workflow's failure changed the device: %q %q", got.Owned.State, inv.JournalOf(12))
	}
	cur := fleet.WorkflowStatus{Name: "node-a-provision-bbbbbbbb", Phase: fleet.WorkflowFailed, FailedAction: "x"}
	if _, err := s.Requests.WorkflowChanged(context.Background(), 12, cur); err != nil {
		t.Fatal(err)
	}
	if got := inv.Get(12); got.Owned.State != fleet.StateFailed {
		t.Fatalf("current Workflow's failure: state %q, want failed", got.Owned.State)
	}
}

// TestQueuedRequest: a desired_action set while another request runs waits for it; fleetd journals
// it once (not at every reconcile), names it in the device view, and says how to cancel it.
func TestQueuedRequest(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateInstalling, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	d = attested(d)
	d.Declared.DesiredAction = fleet.ActionWipe
	inv := fleettest.NewNetBox(d)
	inst := fleettest.NewInstaller()
	inst.Set("node-a-provision-aaaaaaaa", fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "stream-image"})
	s := newTestService(inv, inst)
	ctx := context.Background()
	for range 2 {
		if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
			t.Fatal(err)
		}
	}
	want := "info: wipe waits for provision request provision-aaaaaaaa (fleet_state installing): it starts when that request ends; clear desired_action to cancel it before then."
	if j := inv.JournalOf(12); len(j) != 1 || j[0] != want {
		t.Errorf("journal %q, want once %q", j, want)
	}
	if got := inv.Get(12); got.Owned.Request != "provision-aaaaaaaa" || got.Declared.DesiredAction != fleet.ActionWipe || inst.Creates() != 0 {
		t.Errorf("the queued wipe started or was dropped: request %q desired_action %q, %d Workflows", got.Owned.Request, got.Declared.DesiredAction, inst.Creates())
	}
	v, err := s.Views.View(ctx, "node-a")
	if err != nil || v.Queued != fleet.ActionWipe {
		t.Errorf("View: queued %q, %v; want wipe", v.Queued, err)
	}
	t.Run("ok/nothing queued: no entry, nothing in the view", func(t *testing.T) {
		d := d
		d.Declared.DesiredAction = fleet.ActionNone
		inv := fleettest.NewNetBox(d)
		s := newTestService(inv, inst)
		if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.Views.View(ctx, "node-a"); len(inv.JournalOf(12)) != 0 || v.Queued != fleet.ActionNone {
			t.Errorf("journal %q, queued %q", inv.JournalOf(12), v.Queued)
		}
	})
}

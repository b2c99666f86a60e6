package fleet_test

import (
	"context"
	"testing"

	. "github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestDecommissionDuringRequest: the owner sets status decommissioning while a request runs. The
// request ends as the lifecycle says, but fleetd never writes over the owner's decommissioning
// (docs/design.md §2: set by the owner and stays), so the retirement is taken once the request ended.
// (Found by the chaos tests, dev/stack/chaos: a provision whose configuration was lost in a
// restart wrote status failed over decommissioning, and the retirement was never taken.)
func TestDecommissionDuringRequest(t *testing.T) {
	ctx := context.Background()
	rows := []struct {
		name      string
		state     State
		request   string
		workflow  WorkflowStatus
		wantState State
	}{
		{"ok/provision fails", StateInstalling, "provision-aaaaaaaa", WorkflowStatus{Phase: WorkflowFailed, FailedAction: "write-image"}, StateFailed},
		{"ok/provision's configuration lost", StateConfiguring, "provision-aaaaaaaa", WorkflowStatus{Phase: WorkflowSucceeded}, StateFailed},
		{"ok/wipe's Workflow succeeds with no receipt", StateWiping, "wipe-aaaaaaaa", WorkflowStatus{Phase: WorkflowSucceeded}, StateUnconfirmed},
		{"ok/wipe fails", StateWiping, "wipe-aaaaaaaa", WorkflowStatus{Phase: WorkflowFailed}, StateFailed},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned.State, d.Owned.Request = StatusDecommissioning, r.state, r.request
			d.Owned.Workflow = WorkflowName("node-a", r.request)
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			r.workflow.Name = d.Owned.Workflow
			inst.Set(d.Owned.Workflow, r.workflow)
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState || got.Status != StatusDecommissioning {
				t.Fatalf("after the request ended: fleet_state %q status %q, want %q with decommissioning kept (%s)",
					got.Owned.State, got.Status, r.wantState, got.Owned.Message)
			}
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got = inv.Get(12)
			if got.Owned.State != StatePending || RequestAction(got.Owned.Request) != ActionRetire || got.Status != StatusDecommissioning {
				t.Errorf("the next reconcile: fleet_state %q request %q status %q, want the retirement taken", got.Owned.State, got.Owned.Request, got.Status)
			}
		})
	}
}

// TestDecommissioningAfterRetirement: the status decommissioning asks for a retirement only of a
// device whose last request was not one (docs/design.md §1): fleetd reads NetBox as it is, where a
// retired device that the owner set planned and decommissioning again looks as before, so it is
// not retired again, nor is a failed retirement retried by the status; desired_action=wipe
// retries it. (The chaos checker expected a second retirement after such a round trip.)
func TestDecommissioningAfterRetirement(t *testing.T) {
	ctx := context.Background()
	rows := []struct {
		name        string
		state       State
		desired     Action
		wantRetired bool // a new retirement is taken
	}{
		{"ok/retired stays retired", StateRetired, ActionNone, false},
		{"ok/a failed retirement is not retried by the status", StateFailed, ActionNone, false},
		{"ok/desired_action wipe retries the retirement", StateFailed, ActionWipe, true},
		{"ok/an unconfirmed retirement is not retried by the status", StateUnconfirmed, ActionNone, false},
		{"ok/desired_action wipe retries an unconfirmed retirement", StateUnconfirmed, ActionWipe, true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			const last = "retire-aaaaaaaa"
			d.Status, d.Owned.State, d.Owned.Request, d.Declared.DesiredAction = StatusDecommissioning, r.state, last, r.desired
			d.Owned.Workflow = WorkflowName("node-a", last)
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			retired := got.Owned.Request != last && RequestAction(got.Owned.Request) == ActionRetire && got.Owned.State == StatePending
			if retired != r.wantRetired || (!r.wantRetired && (got.Owned.State != r.state || got.Owned.Request != last)) {
				t.Errorf("fleet_state %q request %q; want a new retirement taken: %t", got.Owned.State, got.Owned.Request, r.wantRetired)
			}
			if NeedsAttention(d) != r.wantRetired {
				t.Errorf("NeedsAttention = %t, want %t", NeedsAttention(d), r.wantRetired)
			}
		})
	}
}

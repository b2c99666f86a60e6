package fleet_test

import (
	"context"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
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
		state     fleet.State
		request   string
		workflow  fleet.WorkflowStatus
		wantState fleet.State
	}{
		{"ok/provision fails", fleet.StateInstalling, "provision-aaaaaaaa", fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "write-image"}, fleet.StateFailed},
		{"ok/provision's configuration lost", fleet.StateConfiguring, "provision-aaaaaaaa", fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, fleet.StateFailed},
		{"ok/wipe's Workflow succeeds with no receipt", fleet.StateWiping, "wipe-aaaaaaaa", fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}, fleet.StateUnconfirmed},
		{"ok/wipe fails", fleet.StateWiping, "wipe-aaaaaaaa", fleet.WorkflowStatus{Phase: fleet.WorkflowFailed}, fleet.StateFailed},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned.State, d.Owned.Request = fleet.StatusDecommissioning, r.state, r.request
			d.Owned.Workflow = fleet.WorkflowName("node-a", r.request)
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			r.workflow.Name = d.Owned.Workflow
			inst.Set(d.Owned.Workflow, r.workflow)
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState || got.Status != fleet.StatusDecommissioning {
				t.Fatalf("after the request ended: fleet_state %q status %q, want %q with decommissioning kept (%s)",
					got.Owned.State, got.Status, r.wantState, got.Owned.Message)
			}
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got = inv.Get(12)
			if got.Owned.State != fleet.StatePending || fleet.RequestAction(got.Owned.Request) != fleet.ActionRetire || got.Status != fleet.StatusDecommissioning {
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
		state       fleet.State
		desired     fleet.Action
		wantRetired bool // a new retirement is taken
	}{
		{"ok/retired stays retired", fleet.StateRetired, fleet.ActionNone, false},
		{"ok/a failed retirement is not retried by the status", fleet.StateFailed, fleet.ActionNone, false},
		{"ok/desired_action wipe retries the retirement", fleet.StateFailed, fleet.ActionWipe, true},
		{"ok/an unconfirmed retirement is not retried by the status", fleet.StateUnconfirmed, fleet.ActionNone, false},
		{"ok/desired_action wipe retries an unconfirmed retirement", fleet.StateUnconfirmed, fleet.ActionWipe, true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			const last = "retire-aaaaaaaa"
			d.Status, d.Owned.State, d.Owned.Request, d.Declared.DesiredAction = fleet.StatusDecommissioning, r.state, last, r.desired
			d.Owned.Workflow = fleet.WorkflowName("node-a", last)
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			retired := got.Owned.Request != last && fleet.RequestAction(got.Owned.Request) == fleet.ActionRetire && got.Owned.State == fleet.StatePending
			if retired != r.wantRetired || (!r.wantRetired && (got.Owned.State != r.state || got.Owned.Request != last)) {
				t.Errorf("fleet_state %q request %q; want a new retirement taken: %t", got.Owned.State, got.Owned.Request, r.wantRetired)
			}
			if fleet.NeedsAttention(d) != r.wantRetired {
				t.Errorf("NeedsAttention = %t, want %t", fleet.NeedsAttention(d), r.wantRetired)
			}
		})
	}
}

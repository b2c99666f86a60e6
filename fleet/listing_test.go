package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// listingInstaller is an installer that can list its Workflows (WorkflowLister), as the
// Kubernetes adapter can; it counts single reads and listings. Listed holds what a listing
// returns (it may lag the installer, as a listing does); ListFail fails the listing.
type listingInstaller struct {
	*fleettest.Installer
	mu       sync.Mutex
	Listed   map[string]fleet.WorkflowStatus
	ListFail error
	reads    int
	lists    int
}

func (l *listingInstaller) Workflow(ctx context.Context, name string) (fleet.WorkflowStatus, error) {
	l.mu.Lock()
	l.reads++
	l.mu.Unlock()
	return l.Installer.Workflow(ctx, name)
}

func (l *listingInstaller) Workflows(context.Context) (map[string]fleet.WorkflowStatus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lists++
	return l.Listed, l.ListFail
}

// TestReconcileAllListsWorkflows: the periodic reconcile reads the Workflows of every running
// request in one listing when the installer can list (one Kubernetes request instead of one per
// running request); a Workflow the listing does not have — created after it — is read on its
// own and never taken for a missing one; when the listing fails, each Workflow is read.
func TestReconcileAllListsWorkflows(t *testing.T) {
	rows := []struct {
		name                 string
		listed               func(all map[string]fleet.WorkflowStatus) map[string]fleet.WorkflowStatus
		listFail             error
		wantLists, wantReads int
		wantViewReads        int // ViewAll after the reconcile: the wipe has ended, two Workflows run
	}{
		{"ok/one listing, no single read", func(all map[string]fleet.WorkflowStatus) map[string]fleet.WorkflowStatus { return all }, nil, 1, 0, 0},
		{"ok/a Workflow created after the listing is read on its own", func(all map[string]fleet.WorkflowStatus) map[string]fleet.WorkflowStatus {
			out := map[string]fleet.WorkflowStatus{}
			for k, v := range all {
				if k != "node-2-provision-aaaaaaaa" {
					out[k] = v
				}
			}
			return out
		}, nil, 1, 1, 1},
		{"ok/the listing fails: each Workflow is read", nil, errors.New("API server unreachable"), 1, 3, 2},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var devs []fleet.Device
			inst := &listingInstaller{Installer: fleettest.NewInstaller(), ListFail: r.listFail}
			all := map[string]fleet.WorkflowStatus{}
			for i, st := range []fleet.State{fleet.StateInstalling, fleet.StatePending, fleet.StateWiping} {
				d := fleettest.Declared(int64(i+1), fmt.Sprintf("node-%d", i+1))
				d.Owned.State, d.Owned.Request = st, map[fleet.State]string{fleet.StateWiping: "wipe-aaaaaaaa"}[st]
				if d.Owned.Request == "" {
					d.Owned.Request = "provision-aaaaaaaa"
				}
				d.Owned.Workflow = fleet.WorkflowName(d.Name, d.Owned.Request)
				if d.Owned.Request == "provision-aaaaaaaa" {
					d = attested(d) // the running provisions' configurations wait
				}
				ws := fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowRunning}
				if st == fleet.StateWiping {
					ws.Phase = fleet.WorkflowSucceeded
				}
				inst.Set(ws.Name, ws)
				all[ws.Name] = ws
				devs = append(devs, d)
			}
			if r.listed != nil {
				inst.Listed = r.listed(all)
			}
			inv := fleettest.NewNetBox(devs...)
			s := newTestService(inv, inst)
			if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			if inst.lists != r.wantLists || inst.reads != r.wantReads {
				t.Errorf("%d listings and %d single reads, want %d and %d", inst.lists, inst.reads, r.wantLists, r.wantReads)
			}
			if got := inv.Get(3); got.Owned.State != fleet.StateUnconfirmed {
				t.Errorf("the wipe whose Workflow succeeded (no receipt) is %q, want unconfirmed", got.Owned.State)
			}
			for _, id := range []int64{1, 2} {
				if got := inv.Get(id); got.Owned.State.Terminal() {
					t.Errorf("device %d with a running Workflow is %q (%s), want it still running", id, got.Owned.State, got.Owned.Message)
				}
			}
			// The operator's list of every device reads the Workflows the same way.
			inst.lists, inst.reads = 0, 0
			views, err := s.Views.ViewAll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if inst.lists != r.wantLists || inst.reads != r.wantViewReads {
				t.Errorf("ViewAll: %d listings and %d single reads, want %d and %d", inst.lists, inst.reads, r.wantLists, r.wantViewReads)
			}
			for _, v := range views {
				if running := v.Device.ID != 3; running && (v.Workflow == nil || v.Workflow.Phase != fleet.WorkflowRunning) {
					t.Errorf("ViewAll: %s's Workflow %+v, want it running", v.Device.Name, v.Workflow)
				}
			}
		})
	}
}

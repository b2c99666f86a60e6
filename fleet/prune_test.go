package fleet_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// pruner is an Installer that records what each PruneWorkflows was asked to keep.
type pruner struct {
	*fleettest.Installer
	keeps []map[string]bool
	err   error
}

func (p *pruner) PruneWorkflows(_ context.Context, keep map[string]bool) error {
	p.keeps = append(p.keeps, maps.Clone(keep))
	return p.err
}

// TestPruneKeepsWaitingWorkflows: after each pass, the periodic reconcile lets the installer
// prune, keeping the Workflows of the requests that still wait for their Workflow's end
// (pending, installing, wiping) and no other: a configuring, active, wiped or failed device's
// Workflow ended and was recorded. A prune that fails fails no reconcile.
func TestPruneKeepsWaitingWorkflows(t *testing.T) {
	var devices []fleet.Device
	for i, st := range []fleet.State{fleet.StatePending, fleet.StateInstalling, fleet.StateWiping, fleet.StateConfiguring, fleet.StateActive, fleet.StateWiped, fleet.StateFailed, fleet.StateNone} {
		d := fleettest.Declared(int64(20+i), "node-"+string(rune('a'+i)))
		req := "wipe-aaaaaaa" + string(rune('a'+i))
		d.Owned = fleet.Owned{State: st, Request: req, Workflow: fleet.WorkflowName(d.Name, req)}
		if st == fleet.StateNone {
			d.Owned = fleet.Owned{}
		}
		devices = append(devices, d)
	}
	inst := fleettest.NewInstaller()
	for _, d := range devices[:3] {
		inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowRunning})
	}
	p := &pruner{Installer: inst, err: errors.New("API down")}
	s := newTestService(fleettest.NewNetBox(devices...), p)
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatalf("ReconcileAll: %v (a failed prune must not fail it)", err)
	}
	if len(p.keeps) != 1 {
		t.Fatalf("PruneWorkflows called %d times in one pass, want once", len(p.keeps))
	}
	want := []string{devices[0].Owned.Workflow, devices[1].Owned.Workflow, devices[2].Owned.Workflow}
	got := slices.Sorted(maps.Keys(p.keeps[0]))
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want the pending, installing and wiping requests' Workflows %v", got, want)
	}
}

package fleet_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// cleanups is fleetd_node_cleanups_total by "step/result", the series that are not 0.
func cleanups(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for _, step := range []string{fleet.NodeCordon, fleet.NodeDelete} {
		for _, result := range []string{fleet.NodeCleaned, fleet.NodeUntouched, fleet.NodeFailed} {
			if v := labelled(t, reg, "fleetd_node_cleanups_total", "step", step, "result", result); v != 0 {
				got[step+"/"+result] = v
			}
		}
	}
	return got
}

// journalAbout is the device's journal entries that mention the cluster's Node.
func journalAbout(inv *fleettest.NetBox, id int64) []string {
	var out []string
	for _, e := range inv.JournalOf(id) {
		if strings.Contains(e, "cluster: ") {
			out = append(out, e)
		}
	}
	return out
}

// TestNodeCordonedAtClaim: the claim of a wipe or a retirement cordons the device's Node beside
// its Workflow, once per request; a provision cordons nothing; a cordon that fails never holds
// the request up, is journaled once and is tried again at the next reconcile pass
// (docs/design.md §1, "Leaving the cluster").
func TestNodeCordonedAtClaim(t *testing.T) {
	ctx := context.Background()
	down := errors.New(`Get "https://cluster:6443/api/v1/nodes/node-a": dial tcp: connection refused`)
	rows := []struct {
		name         string
		status       fleet.Status
		desired      fleet.Action
		node         string // the Node the cluster has ("" none)
		cordoned     bool   // and whether it is cordoned already
		failClaim    bool   // the cluster down at the claim, back for the passes
		passes       int
		wantCordoned bool
		want         map[string]float64 // fleetd_node_cleanups_total
		wantJournal  []string
	}{
		{name: "ok/a wipe's claim cordons the Node", status: fleet.StatusActive, desired: fleet.ActionWipe, node: "node-a",
			wantCordoned: true, want: map[string]float64{"cordon/done": 1}, wantJournal: []string{"info: cluster: Node node-a cordoned for wipe-"}},
		{name: "ok/a retirement's claim (decommissioning) cordons it, and the passes ask no more", status: fleet.StatusDecommissioning, node: "node-a",
			passes: 2, wantCordoned: true, want: map[string]float64{"cordon/done": 1}, wantJournal: []string{"info: cluster: Node node-a cordoned for retire-"}},
		{name: "ok/a Node cordoned already (the operator drained it) is left as it is", status: fleet.StatusDecommissioning, node: "node-a", cordoned: true,
			passes: 1, wantCordoned: true, want: map[string]float64{"cordon/none": 1}},
		{name: "ok/a device with no Node (a class not joining Kubernetes)", status: fleet.StatusActive, desired: fleet.ActionWipe,
			passes: 1, want: map[string]float64{"cordon/none": 1}},
		{name: "ok/a provision cordons nothing", status: fleet.StatusStaged, desired: fleet.ActionProvision, node: "node-a",
			passes: 1, want: map[string]float64{}},
		{name: "refuse/the cluster down at the claim: the wipe goes on, the next pass cordons", status: fleet.StatusActive, desired: fleet.ActionWipe,
			node: "node-a", failClaim: true, passes: 2, wantCordoned: true, want: map[string]float64{"cordon/failed": 1, "cordon/done": 1},
			wantJournal: []string{"warning: cluster: cordoning Node node-a failed: Get ", "info: cluster: Node node-a cordoned for wipe-"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Declared.DesiredAction = r.status, r.desired
			if r.desired != fleet.ActionProvision {
				d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa",
					LDevIDSerial: "0a01", LAKSerial: "0b01", Message: "Delivered."}
			}
			cl := fleettest.NewCluster()
			if r.node != "" {
				cl.AddNode(r.node)
				if r.cordoned {
					if _, err := cl.CordonNode(ctx, r.node); err != nil {
						t.Fatal(err)
					}
				}
			}
			if r.failClaim {
				cl.Fail = down
			}
			inv, inst, reg := fleettest.NewNetBox(d), fleettest.NewInstaller(), prometheus.NewRegistry()
			s := newLeavingService(inv, inst, nil, cl, reg)
			out, err := s.Requests.Reconcile(ctx, 12)
			if err != nil || out.Result != "accepted" {
				t.Fatalf("the claim: %+v, %v; want accepted", out, err)
			}
			claimed := inv.Get(12)
			if _, err := inst.Workflow(ctx, claimed.Owned.Workflow); err != nil {
				t.Errorf("the claim's Workflow %s: %v; a cordon must never hold the request up", claimed.Owned.Workflow, err)
			}
			if r.wantJournal != nil && !strings.Contains(out.Detail, "cluster: ") {
				t.Errorf("the claim's decision line %q says nothing of the Node", out.Detail)
			}
			cl.Fail = nil
			for range r.passes {
				if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
					t.Fatal(err)
				}
			}
			if exists, cordoned := cl.Node("node-a"); exists != (r.node != "") || cordoned != r.wantCordoned {
				t.Errorf("Node node-a exists %v, cordoned %v; want %v, %v", exists, cordoned, r.node != "", r.wantCordoned)
			}
			if got := cleanups(t, reg); !maps.Equal(got, r.want) {
				t.Errorf("fleetd_node_cleanups_total %v, want %v (one cluster call per request once it worked)", got, r.want)
			}
			journ := journalAbout(inv, 12)
			if len(journ) != len(r.wantJournal) {
				t.Fatalf("journal about the Node %q, want %d entries like %q", journ, len(r.wantJournal), r.wantJournal)
			}
			for i, want := range r.wantJournal {
				if !strings.HasPrefix(journ[i], want) {
					t.Errorf("journal entry %d %q, want it to start %q", i, journ[i], want)
				}
			}
		})
	}
}

// TestNodeDeletedOnItsReceipt: the Node of a machine whose wipe (retirement) is recorded on its
// receipt is deleted with the record; a deletion that fails never refuses the receipt and is
// retried by the reconcile passes (RemoveLeftNodes) while the cluster still has the Node; a
// request that ended unconfirmed, or a device still running, keeps its Node.
func TestNodeDeletedOnItsReceipt(t *testing.T) {
	ctx := context.Background()
	down := errors.New(`Delete "https://cluster:6443/api/v1/nodes/node-a": dial tcp: connection refused`)
	for _, request := range []string{"wipe-aaaaaaaa", "retire-aaaaaaaa"} {
		t.Run("ok/the "+request+" receipt deletes the Node", func(t *testing.T) {
			d := wipingNode(request)
			cl, reg := fleettest.NewCluster(), prometheus.NewRegistry()
			cl.AddNode("node-a")
			cl.AddNode("node-b")
			inv := fleettest.NewNetBox(d)
			s := newLeavingService(inv, fleettest.NewInstaller(), nil, cl, reg)
			out, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, request))
			if err != nil || out.Result != fleet.ReceiptRecorded || !strings.Contains(out.Detail, "Node node-a deleted") {
				t.Fatalf("the receipt: %+v, %v; want recorded, saying the Node was deleted", out, err)
			}
			if !slices.Equal(cl.DeletedNodes, []string{"node-a"}) {
				t.Errorf("Nodes deleted %q, want node-a alone", cl.DeletedNodes)
			}
			if j := journalAbout(inv, 12); len(j) != 1 || !strings.HasPrefix(j[0], "info: cluster: Node node-a deleted: request "+request) {
				t.Errorf("journal about the Node %q, want the deletion", j)
			}
			// The next passes find nothing left: no call, nothing counted.
			if outs := s.Requests.RemoveLeftNodes(ctx, []fleet.Device{inv.Get(12)}, clusterNodes(cl)); len(outs) != 0 {
				t.Errorf("a pass after the deletion: %+v, want nothing", outs)
			}
			if got := cleanups(t, reg); !maps.Equal(got, map[string]float64{"delete/done": 1}) {
				t.Errorf("fleetd_node_cleanups_total %v, want delete/done 1", got)
			}
		})
	}
	t.Run("refuse/the cluster down at the receipt: recorded all the same, the next pass deletes", func(t *testing.T) {
		d := wipingNode("wipe-aaaaaaaa")
		cl, reg := fleettest.NewCluster(), prometheus.NewRegistry()
		cl.AddNode("node-a")
		cl.Fail = down
		inv := fleettest.NewNetBox(d)
		s := newLeavingService(inv, fleettest.NewInstaller(), nil, cl, reg)
		if out, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, d.Owned.Request)); err != nil || out.Result != fleet.ReceiptRecorded {
			t.Fatalf("the receipt with the cluster down: %+v, %v; want recorded (the Node is fleetd's to clean up, not the agent's)", out, err)
		}
		if got := inv.Get(12).Owned.State; got != fleet.StateWiped {
			t.Fatalf("fleet_state %s, want wiped", got)
		}
		outs := s.Requests.RemoveLeftNodes(ctx, []fleet.Device{inv.Get(12)}, clusterNodes(cl))
		if len(outs) != 1 || outs[0].Result != "node-delete-failed" {
			t.Errorf("a pass with the cluster still down: %+v, want one node-delete-failed", outs)
		}
		cl.Fail = nil
		outs = s.Requests.RemoveLeftNodes(ctx, []fleet.Device{inv.Get(12)}, clusterNodes(cl))
		if len(outs) != 1 || outs[0].Result != "node-deleted" || !slices.Equal(cl.DeletedNodes, []string{"node-a"}) {
			t.Errorf("the pass after the cluster is back: %+v, deleted %q; want node-a deleted", outs, cl.DeletedNodes)
		}
		j := journalAbout(inv, 12)
		if len(j) != 2 || !strings.HasPrefix(j[0], "warning: cluster: deleting Node node-a failed: Delete ") || !strings.HasPrefix(j[1], "info: cluster: Node node-a deleted") {
			t.Errorf("journal about the Node %q, want the first failure once, then the deletion", j)
		}
		if got := cleanups(t, reg); !maps.Equal(got, map[string]float64{"delete/failed": 2, "delete/done": 1}) {
			t.Errorf("fleetd_node_cleanups_total %v, want delete/failed 2, delete/done 1", got)
		}
	})
	t.Run("refuse/an unconfirmed wipe keeps its Node: nothing proves the machine was erased", func(t *testing.T) {
		d := wipingNode("wipe-aaaaaaaa")
		cl := fleettest.NewCluster()
		cl.AddNode("node-a")
		inv := fleettest.NewNetBox(d)
		s := newLeavingService(inv, fleettest.NewInstaller(), nil, cl, prometheus.NewRegistry())
		ws := fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowSucceeded}
		if out, err := s.Requests.WorkflowChanged(ctx, 12, ws); err != nil || out.Result != string(fleet.StateUnconfirmed) {
			t.Fatalf("the Workflow's success without a receipt: %+v, %v; want unconfirmed", out, err)
		}
		if outs := s.Requests.RemoveLeftNodes(ctx, []fleet.Device{inv.Get(12)}, clusterNodes(cl)); len(outs) != 0 || len(cl.DeletedNodes) != 0 {
			t.Errorf("a pass over the unconfirmed device: %+v, deleted %q; want its Node kept", outs, cl.DeletedNodes)
		}
	})
	t.Run("refuse/a pass deletes no Node of a device in service", func(t *testing.T) {
		active, joining := fleettest.Declared(12, "node-a"), fleettest.Declared(13, "node-b")
		active.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa"}
		joining.Owned = fleet.Owned{State: fleet.StateJoining, Request: "provision-bbbbbbbb"}
		cl := fleettest.NewCluster()
		cl.AddNode("node-a")
		cl.AddNode("node-b")
		s := newLeavingService(fleettest.NewNetBox(active, joining), fleettest.NewInstaller(), nil, cl, prometheus.NewRegistry())
		if outs := s.Requests.RemoveLeftNodes(ctx, []fleet.Device{active, joining}, clusterNodes(cl)); len(outs) != 0 || len(cl.DeletedNodes) != 0 {
			t.Errorf("a pass over active and joining devices: %+v, deleted %q; want none", outs, cl.DeletedNodes)
		}
	})
}

// clusterNodes is the Node watch's view of the in-memory cluster.
func clusterNodes(cl *fleettest.Cluster) func(string) (fleet.NodeReport, bool) {
	return func(name string) (fleet.NodeReport, bool) {
		exists, _ := cl.Node(name)
		return fleet.NodeReport{Name: name}, exists
	}
}

// TestLeavingNodeIsTheAttestedOne: the Node fleetd cordons and deletes is the one of the name the
// machine was attested as, never the device's NetBox name, which any device editor may change:
// renaming a leaving device after another node (a control plane fleetd does not manage) makes
// fleetd touch neither that node nor any other but the machine's own.
func TestLeavingNodeIsTheAttestedOne(t *testing.T) {
	ctx := context.Background()
	renamed := func(d fleet.Device) fleet.Device {
		d.Owned.Identity = fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: "provision-aaaaaaaa", Name: "node-a"}
		d.Name = "cp-1"
		return d
	}
	t.Run("refuse/a wipe's claim on a device renamed after cp-1 cordons node-a, not cp-1", func(t *testing.T) {
		d := fleettest.Declared(12, "node-a")
		d.Status, d.Declared.DesiredAction = fleet.StatusActive, fleet.ActionWipe
		d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa",
			LDevIDSerial: "0a01", LAKSerial: "0b01", Message: "Delivered."}
		d = renamed(d)
		cl := fleettest.NewCluster()
		cl.AddNode("node-a")
		cl.AddNode("cp-1")
		s := newLeavingService(fleettest.NewNetBox(d), fleettest.NewInstaller(), nil, cl, prometheus.NewRegistry())
		if out, err := s.Requests.Reconcile(ctx, 12); err != nil || out.Result != "accepted" {
			t.Fatalf("the claim: %+v, %v", out, err)
		}
		if _, cordoned := cl.Node("cp-1"); cordoned {
			t.Error("cp-1, the name the device was given, is cordoned")
		}
		if _, cordoned := cl.Node("node-a"); !cordoned {
			t.Error("node-a, the machine's own Node, is not cordoned")
		}
	})
	t.Run("refuse/its receipt deletes node-a, not cp-1, and a pass after a failure retries node-a alone", func(t *testing.T) {
		d := renamed(wipingNode("wipe-aaaaaaaa"))
		cl := fleettest.NewCluster()
		cl.AddNode("node-a")
		cl.AddNode("cp-1")
		cl.Fail = errors.New("connection refused")
		inv := fleettest.NewNetBox(d)
		s := newLeavingService(inv, fleettest.NewInstaller(), nil, cl, prometheus.NewRegistry())
		if out, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, d.Owned.Request)); err != nil || out.Result != fleet.ReceiptRecorded {
			t.Fatalf("the receipt: %+v, %v", out, err)
		}
		cl.Fail = nil
		wiped := inv.Get(12)
		if !wiped.Owned.Identity.Empty() || wiped.Name != "cp-1" {
			t.Fatalf("after the receipt: identity %+v, name %s; want it cleared, the name cp-1", wiped.Owned.Identity, wiped.Name)
		}
		s.Requests.RemoveLeftNodes(ctx, []fleet.Device{wiped}, clusterNodes(cl))
		if !slices.Equal(cl.DeletedNodes, []string{"node-a"}) {
			t.Errorf("Nodes deleted %q, want node-a alone (cp-1 is the name an editor gave the device)", cl.DeletedNodes)
		}
	})
	t.Run("refuse/a wiped device renamed after a Node is no deletion of it", func(t *testing.T) {
		d := fleettest.Declared(12, "cp-1")
		d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-aaaaaaaa"}
		cl := fleettest.NewCluster()
		cl.AddNode("cp-1")
		s := newLeavingService(fleettest.NewNetBox(d), fleettest.NewInstaller(), nil, cl, prometheus.NewRegistry())
		if outs := s.Requests.RemoveLeftNodes(ctx, []fleet.Device{d}, clusterNodes(cl)); len(outs) != 0 || len(cl.DeletedNodes) != 0 {
			t.Errorf("a pass over a wiped device named cp-1: %+v, deleted %q; want nothing", outs, cl.DeletedNodes)
		}
	})
}

package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// renamed is an editor's save of device id under name: NetBox's name is no field of fleetd's, so
// the seal still verifies and the change log shows no save of fleetd's fields.
func renamed(inv *fleettest.NetBox, id int64, name string) {
	inv.WriteAs(fleettest.Owner, id, func(d *fleet.Device) { d.Name = name })
}

// TestNodeAccessRenamedDevice: a device editor swaps names so that a refused machine's kubelet
// certificate (system:node:node-a) names a device in good standing. fleetd judges a node by the
// device of its name, so a device's sealed standing counts only under the name it was attested
// under (fleet_identity's name): a device renamed since is denied `renamed` under its new name,
// and its old name has no device. A device attested before fleetd recorded the name keeps being
// judged as it was; a change of case is no rename (node names are lowercase).
func TestNodeAccessRenamedDevice(t *testing.T) {
	good := func(id int64, name string) fleet.Device { return attested(node(id, name)) }
	failed := func(id int64, name string) fleet.Device {
		return attested(with(node(id, name), func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed }))
	}
	wiped := with(node(12, "node-a"), func(d *fleet.Device) {
		d.Status, d.Owned = fleet.StatusOffline, fleet.Owned{State: fleet.StateWiped, Request: "wipe-cccccccc"} // a wipe clears the identity
	})
	unnamed := func(d fleet.Device) fleet.Device { d.Owned.Identity.Name = ""; return d } // attested by an older fleetd
	type ask struct {
		node    string
		result  string
		refusal string
	}
	for _, tc := range []struct {
		name    string
		devices []fleet.Device
		edit    func(inv *fleettest.NetBox)
		asks    []ask
		// listingOnly: the device stays in good standing, and a read that finds a device in
		// good standing changes no entry (nodeview.go, judged): only the listing moves its name.
		listingOnly bool
	}{
		{name: "ok/attested under its name", devices: []fleet.Device{good(12, "node-a"), good(13, "node-b")},
			asks: []ask{{"node-a", fleet.NodeNoOpinion, ""}, {"node-b", fleet.NodeNoOpinion, ""}}},
		{name: "ok/renamed in case only", devices: []fleet.Device{good(12, "node-a")},
			edit: func(inv *fleettest.NetBox) { renamed(inv, 12, "Node-A") },
			asks: []ask{{"node-a", fleet.NodeNoOpinion, ""}}, listingOnly: true},
		{name: "ok/attested before fleetd recorded the name, renamed", devices: []fleet.Device{unnamed(good(13, "node-b"))},
			edit: func(inv *fleettest.NetBox) { renamed(inv, 13, "node-x") },
			asks: []ask{{"node-x", fleet.NodeNoOpinion, ""}}, listingOnly: true},
		{name: "refuse/a failed machine's name given to a device in good standing", devices: []fleet.Device{failed(12, "node-a"), good(13, "node-b")},
			edit: func(inv *fleettest.NetBox) { renamed(inv, 12, "node-a-old"); renamed(inv, 13, "node-a") },
			asks: []ask{{"node-a", fleet.NodeDenied, fleet.NodeRefusedRenamed}, {"node-b", fleet.NodeDenied, fleet.NodeRefusedUnknownNode},
				{"node-a-old", fleet.NodeDenied, fleet.NodeRefusedBootFailed}}},
		{name: "refuse/a wiped machine's name given to a device in good standing", devices: []fleet.Device{wiped, good(13, "node-b")},
			edit: func(inv *fleettest.NetBox) { renamed(inv, 12, "node-a-wiped"); renamed(inv, 13, "node-a") },
			asks: []ask{{"node-a", fleet.NodeDenied, fleet.NodeRefusedRenamed}}},
		{name: "refuse/two devices' names exchanged", devices: []fleet.Device{failed(12, "node-a"), good(13, "node-b")},
			edit: func(inv *fleettest.NetBox) {
				renamed(inv, 12, "tmp")
				renamed(inv, 13, "node-a")
				renamed(inv, 12, "node-b")
			},
			asks: []ask{{"node-a", fleet.NodeDenied, fleet.NodeRefusedRenamed}, {"node-b", fleet.NodeDenied, fleet.NodeRefusedBootFailed}}},
		{name: "refuse/a device renamed alone", devices: []fleet.Device{good(13, "node-b")},
			edit: func(inv *fleettest.NetBox) { renamed(inv, 13, "node-x") },
			asks: []ask{{"node-x", fleet.NodeDenied, fleet.NodeRefusedRenamed}, {"node-b", fleet.NodeDenied, fleet.NodeRefusedUnknownNode}}},
	} {
		// The rename reaches the view either way: the next listing, or NetBox's webhook (a read
		// of the device judged with its change log).
		for _, by := range []string{"listing", "read"} {
			if by == "read" && tc.listingOnly {
				continue
			}
			t.Run(tc.name+"/by "+by, func(t *testing.T) {
				ctx := context.Background()
				inv := fleettest.NewNetBox(append(tc.devices, node(1, "n1"), node(2, "n2"), node(3, "n3"))...)
				s := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil)
				if _, err := s.Requests.ReconcileAll(ctx); err != nil {
					t.Fatal(err)
				}
				if tc.edit != nil {
					tc.edit(inv)
				}
				for _, d := range tc.devices {
					if by == "read" {
						if _, err := s.Requests.Reconcile(ctx, d.ID); err != nil {
							t.Fatal(err)
						}
					}
				}
				if by == "listing" {
					if _, err := s.Requests.ReconcileAll(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for _, a := range tc.asks {
					got := s.NodeAccess.Decide(asNode(a.node))
					if got.Result != a.result || got.Refusal.Code != a.refusal {
						t.Errorf("%s: %+v, want %s %q", a.node, got, a.result, a.refusal)
					}
					if a.refusal == fleet.NodeRefusedRenamed && (!strings.Contains(got.Refusal.Reason, "attested as") || !strings.Contains(got.Refusal.Reason, "provisioned again")) {
						t.Errorf("%s: reason %q does not say the device was renamed and what to do", a.node, got.Refusal.Reason)
					}
				}
				for _, d := range tc.devices {
					if got := inv.Get(d.ID).Owned; got.State != d.Owned.State || got.Identity.Name != d.Owned.Identity.Name {
						t.Errorf("device %d is %s attested as %q after the rename, want %s as %q: a rename changes nothing of fleetd's",
							d.ID, got.State, got.Identity.Name, d.Owned.State, d.Owned.Identity.Name)
					}
				}
			})
		}
	}
}

// A device renamed back to the name it was attested under is a node of that name again from the
// next reconcile pass (its listing puts the denial in doubt, its read with the change log lifts
// it): the rename changed none of fleetd's values.
func TestNodeAccessRenamedBack(t *testing.T) {
	ctx := context.Background()
	inv := fleettest.NewNetBox(attested(node(13, "node-b")), node(1, "n1"), node(2, "n2"), node(3, "n3"))
	s := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil)
	renamed(inv, 13, "node-x")
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("node-x")); got.Refusal.Code != fleet.NodeRefusedRenamed {
		t.Fatalf("node-x: %+v, want denied renamed", got)
	}
	renamed(inv, 13, "node-b")
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct{ node, result string }{{"node-b", fleet.NodeNoOpinion}, {"node-x", fleet.NodeDenied}} {
		if got := s.NodeAccess.Decide(asNode(a.node)); got.Result != a.result {
			t.Errorf("%s after the rename back and a pass: %+v, want %s", a.node, got, a.result)
		}
	}
}

package fleet_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// newAccessService is a service whose webhook policy is cfg, with its metrics on reg.
func newAccessService(t *testing.T, inv *fleettest.NetBox, cfg fleet.NodeAccessConfig, reg prometheus.Registerer) testService {
	t.Helper()
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser,
		NodeAccess: cfg}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, ChangeLog: inv, Installer: fleettest.NewInstaller(),
		Catalog: fleettest.Catalog(), Clock: clock, Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return testService{Service: s, clock: clock}
}

// node is a device in good standing as a node: active on its provision, its last boot check ok.
func node(id int64, name string) fleet.Device {
	d := fleettest.Declared(id, name)
	d.Status = fleet.StatusActive
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", BootCheck: fleet.BootCheckOK, LastBootCheck: testEpoch}
	return d
}

func with(d fleet.Device, edit func(*fleet.Device)) fleet.Device {
	edit(&d)
	return d
}

func asNode(name string) fleet.NodeRequest {
	return fleet.NodeRequest{User: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}, Verb: "get", Resource: "nodes", Name: name}
}

// TestNodeAccessDecisions: the webhook's answer about one node's request after a listing, by the
// device's sealed fields: no opinion for a node in good standing (never Allowed), a denial for one
// whose device is leaving, erased, failed its boot check, or whose fields fleetd does not vouch
// for, and for a node no device is named for.
func TestNodeAccessDecisions(t *testing.T) {
	forged := func(inv *fleettest.NetBox) {
		// An editor puts a wiped device's fields back to active, ok: values fleetd never wrote,
		// under the seal of its wiped ones.
		inv.WriteAs(fleettest.Owner, 9, func(d *fleet.Device) {
			d.Owned.State, d.Owned.Request, d.Owned.BootCheck = fleet.StateActive, "provision-bbbbbbbb", fleet.BootCheckOK
		})
	}
	for _, tc := range []struct {
		name    string
		device  fleet.Device
		after   func(*fleettest.NetBox) // NetBox's changes after the device was sealed, before the listing
		req     fleet.NodeRequest
		result  string
		refusal string
	}{
		{name: "ok/active", device: node(9, "n9"), req: asNode("n9"), result: fleet.NodeNoOpinion},
		{name: "ok/drift", device: with(node(9, "n9"), func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckDrift }),
			req: asNode("n9"), result: fleet.NodeNoOpinion},
		{name: "ok/no-check-lately", device: with(node(9, "n9"), func(d *fleet.Device) { d.Owned.LastBootCheck = testEpoch.AddDate(0, -1, 0) }),
			req: asNode("n9"), result: fleet.NodeNoOpinion},
		{name: "ok/failed-provision", device: with(node(9, "n9"), func(d *fleet.Device) { d.Owned.State = fleet.StateFailed }),
			req: asNode("n9"), result: fleet.NodeNoOpinion},
		{name: "ok/name-case", device: node(9, "N9-Rack2"), req: asNode("n9-rack2"), result: fleet.NodeNoOpinion},
		{name: "ok/unmanaged", device: node(9, "n9"), req: asNode("cp-1"), result: fleet.NodeUnmanaged},
		{name: "ok/not-a-node", device: node(9, "n9"),
			req: fleet.NodeRequest{User: "system:node:ghost", Groups: []string{"system:authenticated"}}, result: fleet.NodeNotANode},
		{name: "refuse/wipe-claimed", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Owned.State, d.Owned.Request = fleet.StatePending, "wipe-cccccccc"
		}), req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedLeaving},
		{name: "refuse/wiping", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Owned.State, d.Owned.Request = fleet.StateWiping, "wipe-cccccccc"
		}), req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedLeaving},
		{name: "refuse/retire-claimed", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Status, d.Owned.State, d.Owned.Request = fleet.StatusDecommissioning, fleet.StatePending, "retire-cccccccc"
		}), req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedLeaving},
		{name: "refuse/wiped", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-cccccccc"}
		}), req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedLeaving},
		{name: "refuse/retired", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Owned = fleet.Owned{State: fleet.StateRetired, Request: "retire-cccccccc"}
		}), req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedLeaving},
		{name: "refuse/untrusted-state", device: with(node(9, "n9"), func(d *fleet.Device) { d.Owned = fleet.Owned{State: fleet.StateUntrusted} }),
			req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedState},
		{name: "refuse/boot-check-failed", device: with(node(9, "n9"), func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed }),
			req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedBootFailed},
		{name: "refuse/forged-unsealed", device: with(node(9, "n9"), func(d *fleet.Device) {
			d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-cccccccc"}
		}), after: forged, req: asNode("n9"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedState}, // the pass found nothing of fleetd's to put back: untrusted (TestNodeAccessForgedBeforeRepair: the listing alone)
		{name: "refuse/unknown-node", device: node(9, "n9"), req: asNode("ghost"), result: fleet.NodeDenied, refusal: fleet.NodeRefusedUnknownNode},
		{name: "refuse/nodes-group-not-a-node-name", device: node(9, "n9"),
			req: fleet.NodeRequest{User: "alice", Groups: []string{"system:nodes"}}, result: fleet.NodeDenied, refusal: fleet.NodeRefusedUnknownNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := fleettest.NewNetBox(tc.device, node(1, "n1"), node(2, "n2"), node(3, "n3"))
			if tc.after != nil {
				tc.after(inv)
			}
			reg := prometheus.NewRegistry()
			s := newAccessService(t, inv, fleet.NodeAccessConfig{Unmanaged: []string{"CP-1"}}, reg)
			if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := s.NodeAccess.Decide(tc.req)
			if got.Result != tc.result || got.Refusal.Code != tc.refusal || got.Deny != (tc.result == fleet.NodeDenied) {
				t.Fatalf("decision %+v, want result %s refusal %q", got, tc.result, tc.refusal)
			}
			if got.Deny && got.Refusal.Reason == "" {
				t.Error("a denial without a reason: the API server's answer must say why")
			}
			if n := testutil.ToFloat64(counterOf(t, reg, "fleetd_authz_decisions_total", tc.result)); n != 1 {
				t.Errorf("fleetd_authz_decisions_total{result=%q} = %v, want 1", tc.result, n)
			}
		})
	}
}

// counterOf gathers one series of a counter with a single label "result".
func counterOf(t *testing.T, reg *prometheus.Registry, name, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no %s{result=%q}", name, result)
	return nil
}

// Before this instance's first listing the webhook knows no device: no opinion about anyone.
func TestNodeAccessNoOpinionBeforeTheFirstListing(t *testing.T) {
	inv := fleettest.NewNetBox(with(node(9, "n9"), func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed }))
	s := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil)
	for _, req := range []fleet.NodeRequest{asNode("n9"), asNode("ghost")} {
		if got := s.NodeAccess.Decide(req); got.Deny || got.Result != fleet.NodeNotBuilt {
			t.Errorf("%s before a listing: %+v, want not-built", req.User, got)
		}
	}
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny {
		t.Errorf("n9 after the listing: %+v, want denied", got)
	}
}

// The view follows this instance's own writes at once: the claim of a wipe denies the node with
// no listing in between. A device read that finds it in good standing again (another instance
// re-provisioned it) does not lift the denial; the next reconcile pass does (its listing puts the
// denial in doubt, its read of the device with the change log lifts it).
func TestNodeAccessFollowsOwnWritesAndReadsOnlyTighten(t *testing.T) {
	ctx := context.Background()
	inv := fleettest.NewNetBox(node(9, "n9"), node(1, "n1"))
	s := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil)
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); got.Deny {
		t.Fatalf("n9 active: %+v, want no opinion", got)
	}
	inv.WriteAs(fleettest.Owner, 9, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
	if _, err := s.Requests.Reconcile(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if st := inv.Get(9).Owned; !strings.HasPrefix(st.Request, "wipe-") {
		t.Fatalf("the reconcile did not claim the wipe: %+v", st)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny || got.Refusal.Code != fleet.NodeRefusedLeaving {
		t.Fatalf("n9 right after fleetd claimed its wipe, no listing since: %+v, want denied wipe-or-retire", got)
	}
	// Another instance ends the wipe and takes a provision (its sealed writes, as fleetd's user).
	d := inv.Get(9)
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-dddddddd", BootCheck: fleet.BootCheckOK, LastBootCheck: testEpoch}
	d.Declared.DesiredAction = fleet.ActionNone
	inv.Set(d)
	if _, err := s.Requests.Reconcile(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny {
		t.Fatalf("n9 after a read found it active again: %+v, want still denied (a read lifts no denial a listing has not put in doubt)", got)
	}
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); got.Deny {
		t.Fatalf("n9 after the next pass: %+v, want no opinion", got)
	}
}

// The brake: when more than the share of the nodes that asked lately would be denied (and at
// least three), fleetd denies none, counts it and says so; once the share falls it denies again.
func TestNodeAccessBrake(t *testing.T) {
	ctx := context.Background()
	failed := func(id int64, name string) fleet.Device {
		return with(node(id, name), func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed })
	}
	inv := fleettest.NewNetBox(node(1, "ok1"), node(2, "ok2"), node(3, "ok3"), node(4, "ok4"), node(5, "ok5"), node(6, "ok6"),
		failed(11, "bad1"), failed(12, "bad2"), failed(13, "bad3"), failed(14, "bad4"))
	reg := prometheus.NewRegistry()
	s := newAccessService(t, inv, fleet.NodeAccessConfig{}, reg)
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	ask := func(name string) fleet.NodeDecision {
		s.clock.Advance(2 * time.Second) // past the count's interval: each answer counts the share again
		return s.NodeAccess.Decide(asNode(name))
	}
	// Six in good standing and two failed ones ask: 2 of 8 would be denied, under three.
	for _, n := range []string{"ok1", "ok2", "ok3", "ok4", "ok5", "ok6"} {
		ask(n)
	}
	for _, n := range []string{"bad1", "bad2"} {
		if got := ask(n); !got.Deny {
			t.Fatalf("%s with 2 of 8 refused: %+v, want denied", n, got)
		}
	}
	// A third: 3 of 9, more than a quarter and at least three: the brake engages.
	if got := ask("bad3"); got.Deny || got.Result != fleet.NodeBraked || got.Refusal.Code != fleet.NodeRefusedBootFailed {
		t.Fatalf("bad3 with 3 of 9 refused: %+v, want braked (no opinion, the refusal kept for the log)", got)
	}
	if !s.NodeAccess.BrakeHolds() {
		t.Fatal("BrakeHolds is false after the brake engaged")
	}
	if got := ask("bad1"); got.Deny || got.Result != fleet.NodeBraked {
		t.Fatalf("bad1 while the brake holds: %+v, want braked", got)
	}
	if got := ask("ghost"); got.Deny {
		t.Fatalf("an unknown node while the brake holds: %+v, want no denial", got)
	}
	if n := testutil.ToFloat64(collectorNamed(t, reg, "fleetd_authz_brake")); n != 1 {
		t.Errorf("fleetd_authz_brake = %v, want 1", n)
	}
	if n := testutil.ToFloat64(collectorNamed(t, reg, "fleetd_authz_brake_engaged_total")); n != 1 {
		t.Errorf("fleetd_authz_brake_engaged_total = %v, want 1", n)
	}
	// Ten minutes later only the good ones and one failed node ask: 1 of 7, the brake releases.
	s.clock.Advance(11 * time.Minute)
	for _, n := range []string{"ok1", "ok2", "ok3", "ok4", "ok5", "ok6"} {
		ask(n)
	}
	if got := ask("bad4"); !got.Deny || got.Result != fleet.NodeDenied {
		t.Fatalf("bad4 once the others stopped asking: %+v, want denied again", got)
	}
	if s.NodeAccess.BrakeHolds() {
		t.Fatal("the brake still holds with 1 of 7 refused")
	}
}

// collectorNamed gathers the single unlabelled series of a metric.
func collectorNamed(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			})
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}

// A listing alone denies a node whose fields fail their seal: before any repair (the inventory
// check lists and writes nothing), an editor's copy of good values over a wiped device is not
// fleetd's word, and the node is refused as untrusted, not let back in.
func TestNodeAccessForgedBeforeRepair(t *testing.T) {
	d := node(9, "n9")
	d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-cccccccc"}
	inv := fleettest.NewNetBox(d, node(1, "n1"))
	inv.WriteAs(fleettest.Owner, 9, func(d *fleet.Device) {
		d.Owned.State, d.Owned.Request, d.Owned.BootCheck = fleet.StateActive, "provision-bbbbbbbb", fleet.BootCheckOK
	})
	s := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil)
	if _, err := s.Review.InventoryCheck(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny || got.Refusal.Code != fleet.NodeRefusedUntrusted {
		t.Fatalf("n9 with forged fields, listed: %+v, want denied untrusted-fields", got)
	}
	if got := s.NodeAccess.Decide(asNode("n1")); got.Deny {
		t.Fatalf("n1: %+v, want no opinion", got)
	}
}

// BenchmarkNodeAccessDecide is one review of a 10,000-device fleet's node, as the webhook answers
// each uncached request of every kubelet: from memory, no NetBox request.
func BenchmarkNodeAccessDecide(b *testing.B) {
	var ds []fleet.Device
	for i := range 10_000 {
		ds = append(ds, node(int64(i+1), fmt.Sprintf("node-%05d", i)))
	}
	inv := fleettest.NewNetBox(ds...)
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: fleettest.ServiceUser}, fleet.Deps{Seal: fleettest.SealKeys(),
		NetBox: inv, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock, Random: rand.New(rand.NewSource(1))})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		b.Fatal(err)
	}
	reqs := make([]fleet.NodeRequest, 1024)
	for i := range reqs {
		reqs[i] = asNode(fmt.Sprintf("node-%05d", (i*7919)%10_000))
	}
	calls := inv.Calls.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := s.NodeAccess.Decide(reqs[i%len(reqs)]); d.Deny {
			b.Fatalf("%+v", d)
		}
	}
	b.StopTimer()
	if n := inv.Calls.Load() - calls; n != 0 {
		b.Fatalf("%d NetBox calls for %d reviews, want none", n, b.N)
	}
}

// The webhook answers while listings and writes change the view (make test runs this package
// under -race): every answer is one of the two a node in either standing gets.
func TestNodeAccessConcurrent(t *testing.T) {
	ctx := context.Background()
	var ds []fleet.Device
	for i := range 40 {
		ds = append(ds, node(int64(i+1), fmt.Sprintf("n%02d", i)))
	}
	inv := fleettest.NewNetBox(ds...)
	s := newAccessService(t, inv, fleet.NodeAccessConfig{BrakeShare: 1}, nil)
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 300 {
				d := s.NodeAccess.Decide(asNode(fmt.Sprintf("n%02d", (g*13+i)%40)))
				if d.Result != fleet.NodeNoOpinion && d.Result != fleet.NodeDenied {
					t.Errorf("answer %+v", d)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 10 {
			inv.WriteAs(fleettest.Owner, int64(i+1), func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
			if _, err := s.Requests.Reconcile(ctx, int64(i+1)); err != nil {
				t.Error(err)
			}
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	for i := range 10 {
		if d := s.NodeAccess.Decide(asNode(fmt.Sprintf("n%02d", i))); !d.Deny {
			t.Errorf("n%02d after its wipe's claim: %+v, want denied", i, d)
		}
	}
}

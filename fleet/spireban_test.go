package fleet_test

import (
	"context"
	"errors"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// spireServer is the SPIRE port in memory: each call takes the next answer of fail (nil: the
// ban succeeds and bans banned agents); the real adapter is tested against SPIRE's server in
// interop/spire.
type spireServer struct {
	mu     sync.Mutex
	calls  []string // the device of each call
	fail   []error
	banned int
}

func (f *spireServer) BanDevice(_ context.Context, device string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, device)
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		if err != nil {
			return 0, err
		}
	}
	n := f.banned
	f.banned = 0 // banned once: the next call finds nothing left
	return n, nil
}

func newSPIREService(inv *fleettest.NetBox, inst *fleettest.Installer, sp fleet.SPIRE, reg *prometheus.Registry) testService {
	return newLeavingService(inv, inst, sp, nil, reg)
}

// newLeavingService is a service with the ports a leaving device's request uses: SPIRE and the
// workload cluster, each nil when not configured.
func newLeavingService(inv *fleettest.NetBox, inst *fleettest.Installer, sp fleet.SPIRE, cl fleet.Cluster, reg *prometheus.Registry) testService {
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, Installer: inst, Catalog: fleettest.Catalog(), Clock: clock,
			Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)), Registry: reg, SPIRE: sp, Cluster: cl})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock}
}

// TestSPIREBanAtClaim: the claim of a wipe or a retirement bans the device's SPIRE agents once,
// beside its Workflow; a provision bans nothing; a ban that fails never holds the request up, is
// journaled once and is tried again at the next reconcile pass (docs/security.md, "SPIRE
// identity").
func TestSPIREBanAtClaim(t *testing.T) {
	ctx := context.Background()
	down := errors.New("rpc error: code = Unavailable desc = connection refused")
	rows := []struct {
		name       string
		status     fleet.Status
		desired    fleet.Action
		wantAction fleet.Action
		fail       []error // the answers to the claim's ban and the passes' after it
		passes     int     // reconcile passes after the claim
		wantCalls  int
		wantBans   map[string]float64 // fleetd_spire_bans_total by result
		wantJourn  []string           // journal entries about SPIRE, in order
	}{
		{name: "ok/a wipe's claim bans the device's agents once", status: fleet.StatusActive, desired: fleet.ActionWipe, wantAction: fleet.ActionWipe,
			wantCalls: 1, wantBans: map[string]float64{"banned": 1}, wantJourn: []string{"info: SPIRE: banned 2 agent(s) of node-a"}},
		{name: "ok/a retirement's claim (status decommissioning) bans them", status: fleet.StatusDecommissioning, wantAction: fleet.ActionRetire,
			wantCalls: 1, wantBans: map[string]float64{"banned": 1}, wantJourn: []string{"info: SPIRE: banned 2 agent(s) of node-a"}},
		{name: "ok/the passes while the wipe runs ban again what attested since, nothing here", status: fleet.StatusActive, desired: fleet.ActionWipe,
			wantAction: fleet.ActionWipe, passes: 2, wantCalls: 3, wantBans: map[string]float64{"banned": 1, "none": 2},
			wantJourn: []string{"info: SPIRE: banned 2 agent(s) of node-a"}},
		{name: "ok/a provision bans nothing", status: fleet.StatusStaged, desired: fleet.ActionProvision, wantAction: fleet.ActionProvision,
			passes: 1, wantCalls: 0, wantBans: map[string]float64{}},
		{name: "refuse/SPIRE down at the claim: the wipe goes on, the next pass bans", status: fleet.StatusActive, desired: fleet.ActionWipe,
			wantAction: fleet.ActionWipe, fail: []error{down, down}, passes: 2, wantCalls: 3, wantBans: map[string]float64{"failed": 2, "banned": 1},
			wantJourn: []string{"warning: SPIRE: the ban of node-a's agents failed (0 banned before the failure): rpc error: code = Unavailable",
				"info: SPIRE: banned 2 agent(s) of node-a"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Declared.DesiredAction = r.status, r.desired
			if r.wantAction != fleet.ActionProvision {
				d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa",
					LDevIDSerial: "0a01", LAKSerial: "0b01", Message: "Delivered."}
			}
			inv, inst, sp, reg := fleettest.NewNetBox(d), fleettest.NewInstaller(), &spireServer{fail: r.fail, banned: 2}, prometheus.NewRegistry()
			s := newSPIREService(inv, inst, sp, reg)
			out, err := s.Requests.Reconcile(ctx, 12)
			if err != nil || out.Result != "accepted" {
				t.Fatalf("the claim: %+v, %v; want accepted", out, err)
			}
			claimed := inv.Get(12)
			if fleet.RequestAction(claimed.Owned.Request) != r.wantAction {
				t.Fatalf("claimed %q, want a %s", claimed.Owned.Request, r.wantAction)
			}
			if _, err := inst.Workflow(ctx, claimed.Owned.Workflow); err != nil {
				t.Errorf("the claim's Workflow %s: %v; a ban must never hold the request up", claimed.Owned.Workflow, err)
			}
			if r.wantCalls > 0 && !strings.Contains(out.Detail, "SPIRE: ") {
				t.Errorf("the claim's decision line %q says nothing of SPIRE", out.Detail)
			}
			for range r.passes {
				if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
					t.Fatal(err)
				}
			}
			if len(sp.calls) != r.wantCalls || slices.ContainsFunc(sp.calls, func(n string) bool { return n != "node-a" }) {
				t.Errorf("SPIRE asked to ban %q, want node-a %d times", sp.calls, r.wantCalls)
			}
			for _, result := range []string{"banned", "none", "failed"} {
				if got := labelled(t, reg, "fleetd_spire_bans_total", "result", result); got != r.wantBans[result] {
					t.Errorf("fleetd_spire_bans_total{result=%q} = %v, want %v", result, got, r.wantBans[result])
				}
			}
			var journ []string
			for _, e := range inv.JournalOf(12) {
				if strings.Contains(e, "SPIRE") {
					journ = append(journ, e)
				}
			}
			if len(journ) != len(r.wantJourn) {
				t.Fatalf("journal about SPIRE %q, want %d entries like %q", journ, len(r.wantJourn), r.wantJourn)
			}
			for i, want := range r.wantJourn {
				if !strings.HasPrefix(journ[i], want) {
					t.Errorf("journal entry %d %q, want it to start %q", i, journ[i], want)
				}
			}
			if got := inv.Get(12); got.Owned.State.Terminal() {
				t.Errorf("fleet_state %s after the passes, want the request still running", got.Owned.State)
			}
		})
	}
}

// TestSPIREBanNotConfigured: with no SPIRE server configured a wipe is claimed as before and no
// ban is counted.
func TestSPIREBanNotConfigured(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status, d.Declared.DesiredAction = fleet.StatusActive, fleet.ActionWipe
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", Message: "Delivered."}
	inv, reg := fleettest.NewNetBox(d), prometheus.NewRegistry()
	s := newSPIREService(inv, fleettest.NewInstaller(), nil, reg)
	if out, err := s.Requests.Reconcile(context.Background(), 12); err != nil || out.Result != "accepted" || strings.Contains(out.Detail, "SPIRE") {
		t.Fatalf("the claim: %+v, %v; want accepted, nothing about SPIRE", out, err)
	}
	for _, result := range []string{"banned", "none", "failed"} {
		if got := labelled(t, reg, "fleetd_spire_bans_total", "result", result); got != 0 {
			t.Errorf("fleetd_spire_bans_total{result=%q} = %v, want 0", result, got)
		}
	}
}

// TestSPIREBanOfTheAttestedName: the agents banned are those of the name the machine was attested
// as (its LDevID's subject), not of the NetBox name an editor may give the device: a wiping device
// renamed after node-b bans node-a's agents, never node-b's.
func TestSPIREBanOfTheAttestedName(t *testing.T) {
	d := fleettest.Declared(12, "node-b")
	d.Status, d.Declared.DesiredAction = fleet.StatusActive, fleet.ActionWipe
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", Message: "Delivered.",
		Identity: fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: "provision-aaaaaaaa", Name: "node-a"}}
	sp := &spireServer{banned: 1}
	s := newSPIREService(fleettest.NewNetBox(d), fleettest.NewInstaller(), sp, prometheus.NewRegistry())
	if out, err := s.Requests.Reconcile(context.Background(), 12); err != nil || out.Result != "accepted" {
		t.Fatalf("the claim: %+v, %v", out, err)
	}
	if !slices.Equal(sp.calls, []string{"node-a"}) {
		t.Errorf("SPIRE asked to ban %q, want node-a, the attested name, alone", sp.calls)
	}
}

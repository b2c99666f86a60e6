package chaos_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/stack/chaos"
)

// TestGenerateReproducible: a schedule is a function of its seed and the pool, so a printed seed
// replays the same steps.
func TestGenerateReproducible(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		a, b := chaos.Generate(seed, poolConfig()), chaos.Generate(seed, poolConfig())
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d gave two schedules:\n%s\n%s", seed, a, b)
		}
	}
	if reflect.DeepEqual(chaos.Generate(1, poolConfig()).Steps, chaos.Generate(2, poolConfig()).Steps) {
		t.Error("seeds 1 and 2 gave the same steps")
	}
}

// TestGenerateShape: over many seeds, every schedule acts only on the pool, always with a node
// among its machines, every fault episode ends (a NetBox fault is healed, a stopped API server
// started), every step draws only coverage keys of the kinds table, and every key of it is drawn.
func TestGenerateShape(t *testing.T) {
	cfg := poolConfig()
	roles := map[string]chaos.Role{}
	for _, m := range cfg.Pool {
		roles[m.Name] = m.Role
	}
	seen := map[string]bool{}
	for seed := int64(1); seed <= 500; seed++ {
		sc := chaos.Generate(seed, cfg)
		nodes := 0
		for _, m := range sc.Machines() {
			r, ok := roles[m]
			if !ok {
				t.Fatalf("seed %d acts on %s, which is not in the pool", seed, m)
			}
			if r == chaos.RoleNode {
				nodes++
			}
		}
		if nodes == 0 || len(sc.Machines()) > cfg.Machines {
			t.Errorf("seed %d acts on %v: want at most %d machines, at least one node", seed, sc.Machines(), cfg.Machines)
		}
		checkEpisodes(t, sc)
		for _, s := range sc.Steps {
			for _, k := range s.Keys() {
				if !slices.Contains(chaos.Keys(), k) {
					t.Fatalf("seed %d draws step %q, whose key %q is not in the kinds table (kinds.go)", seed, s, k)
				}
				seen[k] = true
			}
		}
	}
	for _, want := range chaos.Keys() {
		if !seen[want] {
			t.Errorf("500 schedules never drew %q", want)
		}
	}
}

// checkEpisodes checks that every NetBox fault is followed by a heal, over at least one step and
// with no other NetBox fault before it (a second rule would be shadowed by the first), that a
// fault only an owner's request (ask, decommission) can meet has one under it, and that every kube-stop is followed
// by a kube-start.
func checkEpisodes(t *testing.T, sc chaos.Schedule) {
	t.Helper()
	open, stops := -1, 0
	ownerOnly, owner := false, false
	for i, s := range sc.Steps {
		switch s.Kind {
		case chaos.NetBoxFault:
			if open >= 0 {
				t.Errorf("seed %d: NetBox fault at step %d while the one of step %d is not healed:\n%s", sc.Seed, i+1, open+1, sc)
			}
			open, owner = i, false
			ownerOnly = s.Arg == "drop-webhooks" || s.Arg == "late-webhooks" || (s.Arg == "5xx" && (s.Method == "PATCH" || s.Method == "POST"))
		case chaos.Ask, chaos.Decommission:
			owner = true
		case chaos.NetBoxHeal:
			if open < 0 || i == open+1 {
				t.Errorf("seed %d: heal at step %d with no step under its fault:\n%s", sc.Seed, i+1, sc)
			}
			if open >= 0 && ownerOnly && !owner {
				t.Errorf("seed %d: step %d %s has no owner's request (ask, decommission) under it, the only thing it can meet:\n%s", sc.Seed, open+1, sc.Steps[open], sc)
			}
			open = -1
		case chaos.KubeStop:
			stops++
		case chaos.KubeStart:
			stops = max(stops-1, 0)
		}
	}
	if open >= 0 || stops != 0 {
		t.Errorf("seed %d leaves a fault on at its end (NetBox fault of step %d, %d stops unhealed):\n%s", sc.Seed, open+1, stops, sc)
	}
}

// TestScheduleString: the printed schedule names every step with what it does, so a violation's
// report says what was played.
func TestScheduleString(t *testing.T) {
	sc := chaos.Schedule{Seed: 7, Steps: []chaos.Step{
		{Kind: chaos.Ask, Machine: "m1", Arg: "provision", Kill: chaos.KillAfterClaim},
		{Kind: chaos.NetBoxFault, Arg: "5xx", Status: 503, Method: "PATCH", N: 4},
		{Kind: chaos.KubeStop},
	}}
	got := sc.String()
	for _, want := range []string{"schedule seed=7 (3 steps)", "1. ask m1 provision +kill-fleetd-after-claim",
		"2. netbox-fault 5xx status=503 method=PATCH n=4", "3. kube-stop"} {
		if !strings.Contains(got, want) {
			t.Errorf("schedule prints\n%s\nwithout %q", got, want)
		}
	}
	if m := sc.Machines(); !slices.Equal(m, []string{"m1"}) {
		t.Errorf("Machines() = %v, want [m1]", m)
	}
}

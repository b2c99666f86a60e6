package chaos_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/stack/chaos"
)

// TestKeys: the kinds table names every step, fault and kill point of the chaos run (a kind dropped
// from the table would no longer be counted or covered).
func TestKeys(t *testing.T) {
	for _, want := range []string{"ask provision", "ask attest", "ask wipe", "decommission", "redeclare", "netboot", "boot",
		"boot-check", "workflow fail", "workflow succeed", "netbox-fault 5xx", "netbox-fault slow", "netbox-fault timeout",
		"netbox-fault drop-webhooks", "netbox-fault late-webhooks", "netbox-heal", "kube-stop", "kube-start", "kill-fleetd",
		"kill-fleetd " + chaos.KillAfterClaim, "kill-fleetd " + chaos.KillDuringEnroll,
		"stale-write desired-action", "stale-write owner-field",
		"renew", "renew " + chaos.RenewAnswerLost, "kill-fleetd " + chaos.KillMidRenewal} {
		if !slices.Contains(chaos.Keys(), want) {
			t.Errorf("Keys() = %v lacks %q", chaos.Keys(), want)
		}
	}
}

// TestNotPlayed: a schedule fails when one of the world's own levers did not happen, or when it
// was cut short; a machine's step that found nothing to do, or failed, does not fail it.
func TestNotPlayed(t *testing.T) {
	sc := chaos.Schedule{Seed: 3, Steps: []chaos.Step{
		{Kind: chaos.Ask, Machine: "m1", Arg: "provision", Kill: chaos.KillAfterClaim},
		{Kind: chaos.Netboot, Machine: "m1"},
		{Kind: chaos.KillFleetd},
	}}
	ok := []chaos.StepResult{
		{Step: sc.Steps[0], Events: []chaos.Event{{Key: "ask provision", Must: true},
			{Key: "kill-fleetd after-claim", Outcome: chaos.Idle, Err: errors.New("not claimed")}}},
		{Step: sc.Steps[1], Events: []chaos.Event{{Key: "netboot", Outcome: chaos.Failed, Err: errors.New("swtpm")}}},
		{Step: sc.Steps[2], Events: []chaos.Event{{Key: "kill-fleetd", Must: true}}},
	}
	if got := chaos.NotPlayed(sc, ok); len(got) != 0 {
		t.Errorf("ok/machine steps and kill points may not happen: NotPlayed = %q, want none", got)
	}
	patch := slices.Clone(ok)
	patch[0].Events = []chaos.Event{{Key: "ask provision", Must: true, Outcome: chaos.Failed, Err: errors.New("the owner's PATCH did not go through: 503")}}
	got := chaos.NotPlayed(sc, patch)
	if len(got) != 1 || !strings.Contains(got[0], "step 1 (ask m1 provision +kill-fleetd-after-claim): ask provision failed: the owner's PATCH did not go through") {
		t.Errorf("refuse/owner's PATCH failed: NotPlayed = %q", got)
	}
	fault := slices.Clone(ok)
	fault[2].Events = []chaos.Event{{Key: "netbox-fault 5xx", Must: true, Outcome: chaos.Idle, Err: errors.New("it faulted nothing")}}
	if got := chaos.NotPlayed(sc, fault); len(got) != 1 || !strings.Contains(got[0], "netbox-fault 5xx idle: it faulted nothing") {
		t.Errorf("refuse/a fault that faulted nothing: NotPlayed = %q", got)
	}
	if got := chaos.NotPlayed(sc, ok[:1]); len(got) != 1 || !strings.Contains(got[0], "steps 2–3 were never played") {
		t.Errorf("refuse/cut short: NotPlayed = %q", got)
	}
}

// TestTally: drawn steps and what became of them are counted by key; a key that never happened
// is listed and marked in the table.
func TestTally(t *testing.T) {
	sc := chaos.Schedule{Steps: []chaos.Step{{Kind: chaos.Workflow, Machine: "m1", Arg: "succeed"}, {Kind: chaos.Netboot, Machine: "m1"}}}
	res := []chaos.StepResult{
		{Step: sc.Steps[0], Events: []chaos.Event{{Key: "workflow fail"}}}, // drawn succeed, played as a failure
		{Step: sc.Steps[1], Events: []chaos.Event{{Key: "netboot", Outcome: chaos.Idle}}},
	}
	var tl chaos.Tally
	tl.Add(sc, res)
	tl.Add(sc, res[:1])
	for k, want := range map[string]chaos.Count{
		"workflow succeed": {Drawn: 2},
		"workflow fail":    {Happened: 2},
		"netboot":          {Drawn: 2, Idle: 1},
	} {
		if got := tl.Count(k); got != want {
			t.Errorf("Count(%q) = %+v, want %+v", k, got, want)
		}
	}
	never := tl.Never()
	if !slices.Contains(never, "workflow succeed") || !slices.Contains(never, "netboot") || slices.Contains(never, "workflow fail") {
		t.Errorf("Never() = %v, want workflow succeed and netboot but not workflow fail", never)
	}
	table := tl.String()
	for _, want := range []string{"coverage: workflow succeed", "never happened", "2 schedules; 1 of"} {
		if !strings.Contains(table, want) {
			t.Errorf("the coverage table\n%s\nlacks %q", table, want)
		}
	}
}

// TestCoveringSeeds: the covering seeds are a function of the pool and base, draw every key at
// least the asked number of times, and are refused with the keys named when no candidates can.
func TestCoveringSeeds(t *testing.T) {
	cfg := poolConfig()
	seeds, err := chaos.CoveringSeeds(cfg, 1, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := chaos.CoveringSeeds(cfg, 1, 1000, 2)
	if !reflect.DeepEqual(seeds, again) {
		t.Errorf("two calls gave %v and %v", seeds, again)
	}
	drawn := map[string]int{}
	steps := 0
	for _, seed := range seeds {
		sc := chaos.Generate(seed, cfg)
		steps += len(sc.Steps)
		for _, s := range sc.Steps {
			for _, k := range s.Keys() {
				drawn[k]++
			}
		}
	}
	for _, k := range chaos.Keys() {
		if drawn[k] < 2 {
			t.Errorf("seeds %v draw %q %d times, want 2", seeds, k, drawn[k])
		}
	}
	t.Logf("covering seeds from 1: %v (%d steps)", seeds, steps)
	if _, err := chaos.CoveringSeeds(cfg, 1, 2, 50); err == nil || !strings.Contains(err.Error(), "seeds 1–2 never draw [") {
		t.Errorf("refuse/too few candidates: err = %v, want one naming the keys never drawn", err)
	}
}

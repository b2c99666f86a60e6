package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack/chaos"
)

// settleBound is how long the world has to come to rest once the faults clear: a few periodic
// reconciles (5 s each) and a netboot and boot per machine.
const settleBound = 2 * time.Minute

// TestChaos plays seeded fault schedules over the pool's machines and checks the promise after
// each (package chaos): `make chaos` plays a few from a new seed, `make soak` many (-schedules),
// `make test` the covering seeds (-covering). It prints `schedules=N violations=M not-played=P`
// and the coverage table (Tally); every violation is printed with its seed and schedule and the
// command that replays it, and so is every schedule whose steps did not happen (NotPlayed). With
// -covering, a step, fault or kill point that never happened fails the run. The summary also says
// how often, over the stack's whole history, another user's save changed a field fleetd owns
// (foreign-writes: the stale writes) and fleetd put its value back (restores).
func TestChaos(t *testing.T) {
	needStack(t)
	seeds := chaosSeeds(t)
	seen := map[string]bool{}
	var tally chaos.Tally
	found, unplayed := 0, 0
	var last chaos.Report
	for _, seed := range seeds {
		p, err := playOne(t, seed)
		if err != nil {
			t.Fatalf("schedule seed=%d could not be played: %v", seed, err)
		}
		tally.Add(p.schedule, p.results)
		last = p.report
		if len(p.notPlayed) > 0 {
			unplayed++
			t.Errorf("NOT PLAYED seed=%d: %d steps did not happen\nnot played: %s\nreplay: go test ./dev/stack/chaos -run TestChaos -seed %d\n%s",
				seed, len(p.notPlayed), strings.Join(p.notPlayed, "\nnot played: "), seed, p.schedule)
		}
		for _, v := range p.violations {
			if seen[v.String()] {
				continue
			}
			seen[v.String()] = true
			found++
			t.Errorf("VIOLATION seed=%d %s\nreplay: go test ./dev/stack/chaos -run TestChaos -seed %d\n%s", seed, v, seed, p.schedule)
		}
	}
	summary := fmt.Sprintf("schedules=%d violations=%d not-played=%d foreign-writes=%d restores=%d", tally.Schedules, found, unplayed,
		last.ForeignWrites, last.Restores)
	t.Log(summary)
	fmt.Fprint(os.Stdout, summary+"\n"+tally.String())
	if never := tally.Never(); *coveringFlag && len(never) > 0 {
		t.Errorf("COVERAGE: the covering seeds %v draw every step, fault and kill point, but %v never happened", seeds, never)
	}
}

// chaosSeeds are the seeds the flags ask for: -covering's (CoveringSeeds from -seed, each key
// drawn coverTimes times), or -schedules seeds from -seed (from the clock when 0).
func chaosSeeds(t *testing.T) []int64 {
	base, n := *seedFlag, *schedulesFlag
	if *coveringFlag {
		seeds, err := chaos.CoveringSeeds(poolConfig(), max(base, 1), coverCandidates, coverTimes)
		if err != nil {
			t.Fatalf("chaos: no covering seeds: %v", err)
		}
		t.Logf("chaos: the covering seeds from %d: %v (replay one: go test ./dev/stack/chaos -run TestChaos -seed N)", max(base, 1), seeds)
		return seeds
	}
	switch {
	case n <= 0 && base != 0:
		n = 1
	case n <= 0:
		n = 5
	}
	if base == 0 {
		base = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("chaos: %d schedules from seed %d (replay the run: go test ./dev/stack/chaos -run TestChaos -seed %d -schedules %d)", n, base, base, n)
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = base + int64(i)
	}
	return seeds
}

// played is one schedule played, settled and checked.
type played struct {
	schedule   chaos.Schedule
	results    []chaos.StepResult
	notPlayed  []string
	violations []chaos.Violation
	report     chaos.Report // the stack's whole history so far
}

// playOne plays the schedule of a seed, lets the world come to rest, and checks the promise.
// A world that does not come to rest is a violation of (a); the error is about the test itself.
func playOne(t *testing.T, seed int64) (played, error) {
	p := played{schedule: chaos.Generate(seed, poolConfig())}
	t.Logf("%s", p.schedule)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	out := logWriter{t}
	r := &chaos.Runner{Stack: testStack, Out: out}
	start := time.Now()
	p.results = r.Run(ctx, p.schedule)
	p.notPlayed = chaos.NotPlayed(p.schedule, p.results)
	machines := p.schedule.Machines()
	err := chaos.Settle(ctx, testStack, machines, settleBound, out)
	if errors.Is(err, chaos.ErrNotAtRest) {
		p.violations = append(p.violations, chaos.Violation{Part: chaos.PartTerminal, Device: strings.Join(machines, ","), What: err.Error()})
	} else if err != nil {
		return p, err
	}
	rep, err := chaos.CheckReport(ctx, chaos.StackSources(testStack))
	if err != nil {
		return p, err
	}
	p.violations, p.report = append(p.violations, rep.Violations...), rep
	t.Logf("chaos seed=%d played and checked in %s: %d violations, %d steps not played", seed, time.Since(start).Round(time.Second), len(rep.Violations), len(p.notPlayed))
	return p, nil
}

// logWriter writes progress lines into the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

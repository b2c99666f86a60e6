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
// each (package chaos): `make test` plays a few, `make soak` many (-schedules). It prints
// `schedules=N violations=M`; every violation is printed with its seed and schedule, and the
// command that replays it.
func TestChaos(t *testing.T) {
	needStack(t)
	base, n := *seedFlag, *schedulesFlag
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
	seen := map[string]bool{}
	found := 0
	played := 0
	for i := range n {
		seed := base + int64(i)
		vs, err := playOne(t, seed)
		if err != nil {
			t.Fatalf("schedule seed=%d could not be played: %v", seed, err)
		}
		played++
		for _, v := range vs {
			if seen[v.String()] {
				continue
			}
			seen[v.String()] = true
			found++
			t.Errorf("VIOLATION seed=%d %s\nreplay: go test ./dev/stack/chaos -run TestChaos -seed %d\n%s", seed, v, seed, chaos.Generate(seed, poolConfig()))
		}
	}
	summary := fmt.Sprintf("schedules=%d violations=%d", played, found)
	t.Log(summary)
	fmt.Fprintln(os.Stdout, summary)
}

// playOne plays the schedule of a seed, lets the world come to rest, and checks the promise.
// A world that does not come to rest is a violation of (a); the error is about the test itself.
func playOne(t *testing.T, seed int64) ([]chaos.Violation, error) {
	sc := chaos.Generate(seed, poolConfig())
	t.Logf("%s", sc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	out := logWriter{t}
	r := &chaos.Runner{Stack: testStack, Out: out}
	start := time.Now()
	r.Run(ctx, sc)
	var vs []chaos.Violation
	err := chaos.Settle(ctx, testStack, sc.Machines(), settleBound, out)
	if errors.Is(err, chaos.ErrNotAtRest) {
		vs = append(vs, chaos.Violation{Part: chaos.PartTerminal, Device: strings.Join(sc.Machines(), ","), What: err.Error()})
	} else if err != nil {
		return nil, err
	}
	found, err := chaos.Check(ctx, chaos.StackSources(testStack))
	if err != nil {
		return nil, err
	}
	t.Logf("chaos seed=%d played and checked in %s: %d violations", seed, time.Since(start).Round(time.Second), len(found))
	return append(vs, found...), nil
}

// logWriter writes progress lines into the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

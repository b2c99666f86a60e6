package chaos

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// maxWorldSteps bounds how often Settle netboots or boots one machine: a request that needs more
// is not coming to rest.
const maxWorldSteps = 6

// Settle brings the world to rest after a schedule: every NetBox fault cleared, the API server
// running, fleetd ready. Then, until every machine is at rest or bound passes, each machine does
// what a real one would: it netboots when a Workflow waits for it (an interrupted Workflow is
// resumed), and boots when its install succeeded and its configuration waits. fleetd's periodic
// reconcile does the rest. The error names every device not at rest after bound: a request that
// never reaches a terminal state breaks promise (a).
func Settle(ctx context.Context, s *stack.Stack, machines []string, bound time.Duration, out io.Writer) error {
	if out == nil {
		out = io.Discard
	}
	s.NetBox().Faults().Clear()
	if err := s.StartKube(ctx); err != nil {
		return fmt.Errorf("settle: start the API server again: %w", err)
	}
	if err := s.WaitFleetdReady(ctx); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	w := &world{s: s}
	acted := map[string]int{}
	booted := map[string]bool{} // requests whose machine booted
	end := time.Now().Add(bound)
	for {
		var busy []string
		for _, name := range machines {
			d, err := w.device(name)
			if err != nil {
				return fmt.Errorf("settle: read %s: %w", name, err)
			}
			if d.quiet() {
				continue
			}
			busy = append(busy, fmt.Sprintf("%s (fleet_state %q, request %q, desired_action %q, status %s)", name, d.state, d.request, d.desired, d.status))
			if acted[name] < maxWorldSteps && w.play(ctx, name, d, booted, out) {
				acted[name]++
			}
		}
		if len(busy) == 0 {
			return w.drain(ctx)
		}
		if time.Now().After(end) {
			return fmt.Errorf("settle: %w %s after the faults cleared: %s", ErrNotAtRest, bound, strings.Join(busy, "; "))
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// play takes the machine's next step if the world has one to take, and reports whether it did.
func (w *world) play(ctx context.Context, name string, d devState, booted map[string]bool, out io.Writer) bool {
	info := w.s.Info()
	if _, ok := info.Machines[name]; !ok {
		return false
	}
	if wf, err := w.openWorkflow(ctx, name); err == nil {
		err := stack.Netboot(ctx, info, name, stack.StepOptions{Out: out})
		fmt.Fprintf(out, "chaos settle: %s netboots Workflow %s: %v\n", name, wf.Name, err)
		return true
	}
	if d.state == "configuring" && !booted[d.request] {
		booted[d.request] = true
		err := stack.Boot(ctx, info, name, stack.StepOptions{Out: out})
		fmt.Fprintf(out, "chaos settle: %s boots for request %s: %v\n", name, d.request, err)
		return true
	}
	return false
}

// drain waits until NetBox delivered every queued webhook, so that the checker reads what the
// world has come to.
func (w *world) drain(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.s.NetBox().WaitIdle(dctx); err != nil {
		return fmt.Errorf("settle: NetBox's webhook queue did not drain: %w", err)
	}
	return nil
}

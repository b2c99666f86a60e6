package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
)

// Runner plays schedules on a running stack.
type Runner struct {
	Stack *stack.Stack
	// Out receives one line per step and the machines' progress; nil discards them.
	Out io.Writer
	// StepTimeout bounds one step (default 3 minutes).
	StepTimeout time.Duration
	// WorkflowWait is how long a netboot or a Workflow step waits for the machine's Workflow to
	// appear when a request is on its way (default 15 s: a dropped webhook waits for the
	// periodic reconcile).
	WorkflowWait time.Duration
	// FaultWait is how long a heal waits for the NetBox faults still open to fault something
	// (default 15 s: three of the chaos stack's periodic reconciles, each of which reads NetBox).
	FaultWait time.Duration

	open   []netboxemu.Fired // the NetBox faults installed since the last heal
	copies []copies          // before each step played, the machines' custom_fields (runner_stale.go)
	kills  int               // SIGKILLs sent in this Run: with several instances, they take turns
}

// StepResult is what one step did: its events (the step's own first, then its kill point's).
// A step that fails is not a violation: under faults most of them fail sometimes, as they would
// for a real owner or machine; the promise is checked after the schedule. A step that did not
// happen is counted (Tally) and, for the world's own levers, fails the schedule (NotPlayed).
type StepResult struct {
	Step   Step
	Events []Event
	Took   time.Duration
}

// Run plays the steps in order and returns what each did. It stops early only when ctx ends.
func (r *Runner) Run(ctx context.Context, sc Schedule) []StepResult {
	out := r.Out
	if out == nil {
		out = io.Discard
	}
	var res []StepResult
	r.open, r.copies, r.kills = nil, nil, 0
	machines := sc.Machines()
	for i, s := range sc.Steps {
		if ctx.Err() != nil {
			break
		}
		r.copies = append(r.copies, r.keepCopies(machines))
		start := time.Now()
		evs := r.step(ctx, s)
		res = append(res, StepResult{Step: s, Events: evs, Took: time.Since(start)})
		fmt.Fprintf(out, "chaos seed=%d step %d/%d %s (%s): %s\n", sc.Seed, i+1, len(sc.Steps), s, res[i].Took.Round(time.Millisecond), words(evs))
		if s.Kind == NetBoxHeal {
			resolveFaults(res, out, sc.Seed)
		}
	}
	resolveFaults(res, out, sc.Seed)
	return res
}

// step plays one step within the step timeout.
func (r *Runner) step(ctx context.Context, s Step) []Event {
	timeout := r.StepTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	k, ok := kindOf(s.Kind)
	if !ok {
		return []Event{{Key: key(s.Kind, s.Arg), Outcome: Failed, Must: true, Err: fmt.Errorf("chaos: unknown step kind %q", s.Kind)}}
	}
	evs := k.play(r, ctx, s)
	evs[0].Must = k.must
	return evs
}

// resolveFaults settles the NetBox faults played so far: one that faulted a request or a
// delivery happened; one that met none by its heal (or the schedule's end) did not.
func resolveFaults(res []StepResult, out io.Writer, seed int64) {
	for i := range res {
		for j := range res[i].Events {
			e := &res[i].Events[j]
			if e.fired == nil {
				continue
			}
			e.Hits, e.fired = e.fired(), nil
			if e.Hits > 0 {
				e.Outcome, e.Err = Happened, nil
			}
			fmt.Fprintf(out, "chaos seed=%d step %d %s faulted %d requests or deliveries\n", seed, i+1, res[i].Step, e.Hits)
		}
	}
}

// words is a step's events as its progress line says them.
func words(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", e.Key, e.Outcome)
		if e.Err != nil {
			b.WriteString(": " + e.Err.Error())
		}
	}
	return b.String()
}

// ask is an owner's step: a desired_action, a decommission or a planned status.
func (r *Runner) ask(ctx context.Context, s Step) []Event {
	var body map[string]any
	switch s.Kind {
	case Ask:
		body = map[string]any{"custom_fields": map[string]any{"desired_action": s.Arg}}
	case Decommission:
		body = map[string]any{"status": "decommissioning"}
	default:
		body = map[string]any{"status": "planned"}
	}
	return r.owner(ctx, s, body)
}

// owner PATCHes the device as the owner, retrying for a while when NetBox fails (an owner, or
// OpenTofu, tries again). With KillAfterClaim it then waits for fleetd's claim and kills fleetd.
func (r *Runner) owner(ctx context.Context, s Step, body map[string]any) []Event {
	id := r.Stack.DeviceID(s.Machine)
	before := r.field(id, "fleet_request")
	var err error
	for end := time.Now().Add(10 * time.Second); ; {
		if _, err = r.Stack.Owner().Patch(ctx, id, body); err == nil || time.Now().After(end) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	if err != nil {
		err = fmt.Errorf("the owner's PATCH did not go through: %w", err)
	}
	evs := []Event{did(key(s.Kind, s.Arg), err)}
	if s.Kill != KillAfterClaim {
		return evs
	}
	claimed := func() bool { return r.field(id, "fleet_request") != before && r.field(id, "fleet_state") == "pending" }
	if err != nil || !waitFor(ctx, 20*time.Second, claimed) {
		return append(evs, idle(killKey(s.Kill), errors.New("fleetd did not claim the request within 20 s, so it was not killed after the claim")))
	}
	return append(evs, did(killKey(s.Kill), r.killFleetd(ctx)))
}

// field reads one of the device's custom fields from the emulator's store (not through the API:
// the world's bookkeeping must not consume the faults meant for fleetd).
func (r *Runner) field(id int64, name string) string {
	cf, err := r.Stack.NetBox().CustomFieldData(id)
	if err != nil {
		return ""
	}
	if v, ok := cf[name].(string); ok {
		return v
	}
	return ""
}

// netboxFault schedules a NetBox fault for the next N requests or deliveries. Whether it
// happened is known at its heal (resolveFaults): it did when it faulted at least one.
func (r *Runner) netboxFault(_ context.Context, s Step) []Event {
	f := r.Stack.NetBox().Faults()
	var fired netboxemu.Fired
	switch s.Arg {
	case "5xx":
		fired = f.AddAPI(netboxemu.APIFaultRule{Method: s.Method, Times: s.N, Fault: netboxemu.APIFault{Status: s.Status}})
	case "slow", "timeout":
		fired = f.AddAPI(netboxemu.APIFaultRule{Method: s.Method, Times: s.N, Fault: netboxemu.APIFault{Delay: s.Delay}})
	case "drop-webhooks":
		fired = f.AddDelivery(netboxemu.DeliveryFaultRule{Times: s.N, Fault: netboxemu.DeliveryFault{Drop: true}})
	case "late-webhooks":
		fired = f.AddDelivery(netboxemu.DeliveryFaultRule{Times: s.N, Fault: netboxemu.DeliveryFault{Delay: s.Delay}})
	default:
		return []Event{did(key(s.Kind, s.Arg), fmt.Errorf("chaos: unknown NetBox fault %q", s.Arg))}
	}
	r.open = append(r.open, fired)
	return r.pendingFault(key(s.Kind, s.Arg), fired)
}

// pendingFault is the event of a fault installed: idle until resolveFaults finds it fired.
func (r *Runner) pendingFault(key string, fired netboxemu.Fired) []Event {
	return []Event{{Key: key, Outcome: Idle, Err: errors.New("it faulted no request or delivery before its heal"), fired: fired}}
}

// netboxHeal clears the NetBox faults, once each has faulted something or FaultWait passed: a
// fault is "the next N requests", and fleetd's periodic reconcile is what meets it when the
// steps under it did not.
func (r *Runner) netboxHeal(ctx context.Context, _ Step) []Event {
	wait := r.FaultWait
	if wait <= 0 {
		wait = 15 * time.Second
	}
	waitFor(ctx, wait, func() bool {
		return !slices.ContainsFunc(r.open, func(fired netboxemu.Fired) bool { return fired() == 0 })
	})
	r.open = nil
	r.Stack.NetBox().Faults().Clear()
	return []Event{did(string(NetBoxHeal), nil)}
}

func (r *Runner) kubeStop(context.Context, Step) []Event {
	return []Event{did(string(KubeStop), r.Stack.StopKube())}
}

func (r *Runner) kubeStart(ctx context.Context, _ Step) []Event {
	return []Event{did(string(KubeStart), r.Stack.StartKube(ctx))}
}

func (r *Runner) kill(ctx context.Context, _ Step) []Event {
	return []Event{did(string(KillFleetd), r.killFleetd(ctx))}
}

// killFleetd SIGKILLs fleetd and waits until its supervisor started a new one (not until that
// one is ready: it may need NetBox or Kubernetes, which may be failing). On a stack of several
// instances the kills of a schedule take turns, the first instance first, so a replay of the seed
// kills the same ones.
func (r *Runner) killFleetd(ctx context.Context) error {
	k := r.kills%r.Stack.FleetdInstances() + 1
	r.kills++
	pid, err := r.Stack.KillFleetdInstance(k, syscall.SIGKILL)
	if err != nil {
		return err
	}
	_, err = r.Stack.WaitNewFleetdInstance(ctx, k, pid)
	return err
}

func (r *Runner) workflowWait() time.Duration {
	if r.WorkflowWait > 0 {
		return r.WorkflowWait
	}
	return 15 * time.Second
}

func (r *Runner) world() *world { return &world{s: r.Stack} }

// waitFor polls cond every 100 ms until it is true (true) or d passed or ctx ended (false).
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

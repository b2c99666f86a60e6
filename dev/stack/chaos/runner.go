package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
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
}

// StepResult is what one step did. A step that fails is not a violation: under faults most of
// them fail sometimes, as they would for a real owner or machine; the promise is checked after
// the schedule.
type StepResult struct {
	Step Step
	Err  error
	Took time.Duration
}

// Run plays the steps in order and returns what each did. It stops early only when ctx ends.
func (r *Runner) Run(ctx context.Context, sc Schedule) []StepResult {
	out := r.Out
	if out == nil {
		out = io.Discard
	}
	var res []StepResult
	for i, s := range sc.Steps {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		err := r.step(ctx, s)
		took := time.Since(start)
		res = append(res, StepResult{Step: s, Err: err, Took: took})
		word := "ok"
		if err != nil {
			word = "failed: " + err.Error()
		}
		fmt.Fprintf(out, "chaos seed=%d step %d/%d %s (%s): %s\n", sc.Seed, i+1, len(sc.Steps), s, took.Round(time.Millisecond), word)
	}
	return res
}

// step plays one step within the step timeout.
func (r *Runner) step(ctx context.Context, s Step) error {
	timeout := r.StepTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch s.Kind {
	case Ask:
		return r.owner(ctx, s, map[string]any{"custom_fields": map[string]any{"desired_action": s.Arg}})
	case Decommission:
		return r.owner(ctx, s, map[string]any{"status": "decommissioning"})
	case Redeclare:
		return r.owner(ctx, s, map[string]any{"status": "planned"})
	case Netboot:
		return r.netboot(ctx, s)
	case Boot:
		return stack.Boot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out})
	case BootCheck:
		return stack.BootCheck(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out})
	case Workflow:
		return r.workflow(ctx, s)
	case NetBoxFault:
		return r.netboxFault(s)
	case NetBoxHeal:
		r.Stack.NetBox().Faults().Clear()
		return nil
	case KubeStop:
		return r.Stack.StopKube()
	case KubeStart:
		return r.Stack.StartKube(ctx)
	case KillFleetd:
		return r.killFleetd(ctx)
	}
	return fmt.Errorf("chaos: unknown step kind %q", s.Kind)
}

// owner PATCHes the device as the owner, retrying for a while when NetBox fails (an owner, or
// OpenTofu, tries again). With KillAfterClaim it then waits for fleetd's claim and kills fleetd.
func (r *Runner) owner(ctx context.Context, s Step, body map[string]any) error {
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
		return fmt.Errorf("the owner's PATCH did not go through: %w", err)
	}
	if s.Kill != KillAfterClaim {
		return nil
	}
	claimed := func() bool { return r.field(id, "fleet_request") != before && r.field(id, "fleet_state") == "pending" }
	if !waitFor(ctx, 20*time.Second, claimed) {
		return errors.New("fleetd did not claim the request within 20 s, so it was not killed after the claim")
	}
	return r.killFleetd(ctx)
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

// netboot netboots the machine once its Workflow is there (or nothing is on its way), killing
// fleetd during the enrollment when the step says so.
func (r *Runner) netboot(ctx context.Context, s Step) error {
	w := r.world()
	w.waitWorkflow(ctx, s.Machine, r.workflowWait())
	if s.Kill != KillDuringEnroll {
		return stack.Netboot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out})
	}
	offset := w.logSize(s.Machine)
	done := make(chan error, 1)
	go func() { done <- stack.Netboot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out}) }()
	var killErr error
	if w.waitEnrolling(ctx, s.Machine, offset, done) {
		sleep(ctx, s.Delay)
		killErr = r.killFleetd(ctx)
	}
	return errors.Join(<-done, killErr)
}

// workflow ends the machine's Workflow as Tinkerbell would, without the machine running it: it
// fails (a timeout), or, when no action ran yet, may succeed (a Template without the agent).
// A Workflow whose actions started is only ever failed: reporting success for actions no one
// ran is not something Tinkerbell does.
func (r *Runner) workflow(ctx context.Context, s Step) error {
	w := r.world()
	w.waitWorkflow(ctx, s.Machine, r.workflowWait())
	wf, err := w.openWorkflow(ctx, s.Machine)
	if err != nil {
		return err
	}
	fail := s.Arg == "fail"
	for _, a := range tinkerbell.Actions(wf) {
		fail = fail || (a.State != "" && !strings.HasSuffix(string(a.State), "PENDING"))
	}
	return stack.DriveWorkflow(ctx, r.Stack.Kube(), wf, stack.Drive{Fail: fail,
		Message: "chaos: Tinkerbell ended the Workflow without the machine (" + s.Arg + ")"})
}

// netboxFault schedules a NetBox fault for the next N requests or deliveries.
func (r *Runner) netboxFault(s Step) error {
	f := r.Stack.NetBox().Faults()
	switch s.Arg {
	case "5xx":
		f.AddAPI(netboxemu.APIFaultRule{Method: s.Method, Times: s.N, Fault: netboxemu.APIFault{Status: s.Status}})
	case "slow", "timeout":
		f.AddAPI(netboxemu.APIFaultRule{Method: s.Method, Times: s.N, Fault: netboxemu.APIFault{Delay: s.Delay}})
	case "drop-webhooks":
		f.AddDelivery(netboxemu.DeliveryFaultRule{Times: s.N, Fault: netboxemu.DeliveryFault{Drop: true}})
	case "late-webhooks":
		f.AddDelivery(netboxemu.DeliveryFaultRule{Times: s.N, Fault: netboxemu.DeliveryFault{Delay: s.Delay}})
	default:
		return fmt.Errorf("chaos: unknown NetBox fault %q", s.Arg)
	}
	return nil
}

// killFleetd SIGKILLs fleetd and waits until its supervisor started a new one (not until that
// one is ready: it may need NetBox or Kubernetes, which may be failing).
func (r *Runner) killFleetd(ctx context.Context) error {
	pid, err := r.Stack.KillFleetd(syscall.SIGKILL)
	if err != nil {
		return err
	}
	_, err = r.Stack.WaitNewFleetd(ctx, pid)
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

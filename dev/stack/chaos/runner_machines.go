package chaos

import (
	"context"
	"errors"
	"strings"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// The machines' steps and Tinkerbell's: each counts as happened when the machine (or
// Tinkerbell) did what the step says, as idle when there was nothing for it to act on.

// netboot netboots the machine once its Workflow is there (or nothing is on its way), killing
// fleetd during the enrollment when the step says so. It happened when the machine's worker ran
// the Workflow, whether its actions succeeded or one failed (a refused enrollment).
func (r *Runner) netboot(ctx context.Context, s Step) []Event {
	w := r.world()
	w.waitWorkflow(ctx, s.Machine, r.workflowWait())
	if s.Kill != KillDuringEnroll {
		return []Event{netbootEvent(stack.Netboot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out}))}
	}
	offset := w.logSize(s.Machine)
	done := make(chan error, 1)
	go func() { done <- stack.Netboot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out}) }()
	kill := idle(killKey(s.Kill), errors.New("the netboot ended before the agent enrolled, so fleetd was not killed during an enrollment"))
	if w.waitEnrolling(ctx, s.Machine, offset, done) {
		sleep(ctx, s.Delay)
		kill = did(killKey(s.Kill), r.killFleetd(ctx))
	}
	return []Event{netbootEvent(<-done), kill}
}

func netbootEvent(err error) Event {
	var failed *stack.ActionError
	switch {
	case errors.Is(err, stack.ErrNoWorkflow):
		return idle(string(Netboot), err)
	case errors.As(err, &failed):
		return Event{Key: string(Netboot), Outcome: Happened, Err: err}
	}
	return did(string(Netboot), err)
}

// boot boots the installed OS; with nothing installed there is nothing to boot.
func (r *Runner) boot(ctx context.Context, s Step) []Event {
	return []Event{bootEvent(stack.Boot(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out}))}
}

func bootEvent(err error) Event {
	if errors.Is(err, stack.ErrNotInstalled) {
		return idle(string(Boot), err)
	}
	return did(string(Boot), err)
}

// bootCheck runs the node's check; a node that is not up has nothing to check, and a check
// fleetd accepted as drift happened.
func (r *Runner) bootCheck(ctx context.Context, s Step) []Event {
	return []Event{bootCheckEvent(stack.BootCheck(ctx, r.Stack.Info(), s.Machine, stack.StepOptions{Out: r.Out}))}
}

func bootCheckEvent(err error) Event {
	switch {
	case errors.Is(err, stack.ErrNotBooted):
		return idle(string(BootCheck), err)
	case errors.Is(err, stack.ErrDrift):
		return Event{Key: string(BootCheck), Outcome: Happened, Err: err}
	}
	return did(string(BootCheck), err)
}

// workflow ends the machine's Workflow as Tinkerbell would, without the machine: the stack's
// Tinkerbell's server and a real worker run it with scripted containers (stack.DriveWorkflow). It
// fails (an action's container exits 1), or, when no action ran yet, may succeed (a Template
// without the agent). A Workflow whose actions started is only ever failed: the scripted
// containers would otherwise succeed actions no machine ran. Its event is what was done
// ("workflow fail" for a success drawn on a Workflow whose actions had started).
func (r *Runner) workflow(ctx context.Context, s Step) []Event {
	w := r.world()
	w.waitWorkflow(ctx, s.Machine, r.workflowWait())
	wf, err := w.openWorkflow(ctx, s.Machine)
	switch {
	case errors.Is(err, stack.ErrNoWorkflow):
		return []Event{idle(key(Workflow, s.Arg), err)}
	case err != nil:
		return []Event{did(key(Workflow, s.Arg), err)}
	}
	fail := s.Arg == "fail"
	for _, a := range tinkerbell.Actions(wf) {
		fail = fail || (a.State != "" && !strings.HasSuffix(string(a.State), "PENDING"))
	}
	done, d := "succeed", stack.Drive{}
	if fail {
		done, d = "fail", stack.Drive{Fail: true, Message: "chaos: Tinkerbell ended the Workflow without the machine (" + s.Arg + ")"}
	}
	return []Event{did(key(Workflow, done), stack.DriveWorkflow(ctx, r.Stack.Info(), r.Stack.Kube(), wf, d))}
}

package tinkerbell

import (
	"context"
	"fmt"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/workflows"
)

// Action is one rendered action as tink-worker would run it: environment and volumes are the
// task's merged with the action's (the worker also binds /workflow, the shared directory).
type Action struct {
	Task    string
	Name    string
	Image   string
	Command []string
	Env     map[string]string
	Volumes []string
	Pid     string
	Timeout time.Duration
	State   tinkv1.WorkflowState // as stored (either spelling)
}

// Actions returns the rendered actions of wf in the order the worker runs them; empty before
// Render.
func Actions(wf *tinkv1.Workflow) []Action {
	var out []Action
	for _, t := range wf.Status.Tasks {
		for _, a := range t.Actions {
			out = append(out, Action{Task: t.Name, Name: a.Name, Image: a.Image, Command: a.Command,
				Env: workflows.MergedEnv(t, a), Volumes: append(append([]string(nil), t.Volumes...), a.Volumes...),
				Pid: a.Pid, Timeout: time.Duration(a.Timeout) * time.Second, State: a.Status})
		}
	}
	return out
}

// ReportAction is tink-worker's report of one action, as tink-server v0.12.2 applies it
// (tinkerbell-talos.md §1 lifecycle 4):
//   - RUNNING sets the action RUNNING with startedAt, the Workflow RUNNING and currentAction;
//   - SUCCESS sets the action SUCCESS with its duration; for the last action the Workflow goes
//     to POST, and ReportAction waits for tink-controller's post step (allowPXE false again when
//     toggleAllowNetboot is on, then SUCCESS). With NewSpelling no controller reads the state
//     (tink-controller v0.12.2 knows only STATE_POST), so that step is done here;
//   - FAILED or TIMEOUT sets the action and the Workflow to that state, with message.
//
// It refuses what a worker could not do: a Workflow that is not PENDING or RUNNING (tink-server
// serves no other), an unknown action, or an action reported before the one ahead of it
// succeeded. state may be given in either spelling; it is written in the chosen one.
func ReportAction(ctx context.Context, c client.Client, wf *tinkv1.Workflow, action string, state tinkv1.WorkflowState, message string, opts ...Option) error {
	o := newOptions(opts)
	var post bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			return fmt.Errorf("read Workflow %s: %w", wf.Name, err)
		}
		var err error
		if post, err = applyReport(wf, action, state, message, o); err != nil {
			return err
		}
		return c.Status().Update(ctx, wf)
	})
	if err != nil {
		return fmt.Errorf("report action %s %s of Workflow %s: %w", action, bare(state), wf.Name, err)
	}
	switch {
	case post && o.newSpelling:
		return finishPost(ctx, c, wf, o)
	case post:
		return waitState(ctx, c, wf, tinkv1.WorkflowStatePost)
	}
	return nil
}

// applyReport changes wf's status for one report; post is true when the Workflow reached POST.
func applyReport(wf *tinkv1.Workflow, action string, state tinkv1.WorkflowState, message string, o options) (post bool, err error) {
	if s := bare(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return false, fmt.Errorf("the Workflow is %q: a worker is served only PENDING or RUNNING Workflows", wf.Status.State)
	}
	ti, ai, ok := findAction(wf, action)
	if !ok {
		return false, fmt.Errorf("the Workflow has no action %q", action)
	}
	if prev, ok := previousUnfinished(wf, ti, ai); ok {
		return false, fmt.Errorf("action %q comes before %q and has not succeeded", prev, action)
	}
	a := &wf.Status.Tasks[ti].Actions[ai]
	now := time.Now().UTC()
	switch bare(state) {
	case "RUNNING":
		t := metav1.NewTime(now)
		a.Status, a.StartedAt, a.Message = o.spell(state), &t, message
		wf.Status.State, wf.Status.CurrentAction = o.spell(tinkv1.WorkflowStateRunning), action
	case "SUCCESS":
		a.Status, a.Seconds, a.Message = o.spell(state), sinceSeconds(a.StartedAt, now), message
		wf.Status.CurrentAction = action
		if isLast(wf, ti, ai) {
			wf.Status.State = o.spell(tinkv1.WorkflowStatePost)
			return true, nil
		}
	case "FAILED", "TIMEOUT":
		a.Status, a.Seconds, a.Message = o.spell(state), sinceSeconds(a.StartedAt, now), message
		wf.Status.State, wf.Status.CurrentAction = o.spell(state), action
	default:
		return false, fmt.Errorf("state %q is not one a worker reports (RUNNING, SUCCESS, FAILED, TIMEOUT)", state)
	}
	return false, nil
}

// finishPost is the newer Tinkerbell's POST step for NewSpelling Workflows, which no controller
// here reads: allowPXE back to false when toggled, then SUCCESS.
func finishPost(ctx context.Context, c client.Client, wf *tinkv1.Workflow, o options) error {
	if wf.Spec.BootOptions.ToggleAllowNetboot && wf.Spec.HardwareRef != "" {
		hw := &tinkv1.Hardware{}
		hw.Name, hw.Namespace = wf.Spec.HardwareRef, wf.Namespace
		if err := setAllowPXE(ctx, c, hw, false); err != nil {
			return err
		}
	}
	return setState(ctx, c, wf, tinkv1.WorkflowStateSuccess, o)
}

// setState writes the Workflow's state directly (either spelling accepted, written in the chosen
// one). After POST→SUCCESS the toggled-false bookkeeping is recorded as tink-controller does.
func setState(ctx context.Context, c client.Client, wf *tinkv1.Workflow, state tinkv1.WorkflowState, o options) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			return err
		}
		wf.Status.State = o.spell(state)
		if bare(state) == "SUCCESS" && wf.Spec.BootOptions.ToggleAllowNetboot {
			wf.Status.BootOptions.AllowNetboot.ToggledFalse = true
		}
		return c.Status().Update(ctx, wf)
	})
	if err != nil {
		return fmt.Errorf("set state %s of Workflow %s: %w", bare(state), wf.Name, err)
	}
	return nil
}

func findAction(wf *tinkv1.Workflow, name string) (int, int, bool) {
	for ti, t := range wf.Status.Tasks {
		for ai, a := range t.Actions {
			if a.Name == name {
				return ti, ai, true
			}
		}
	}
	return 0, 0, false
}

// previousUnfinished names an action before (ti, ai) that has not succeeded.
func previousUnfinished(wf *tinkv1.Workflow, ti, ai int) (string, bool) {
	for i := 0; i <= ti; i++ {
		for j, a := range wf.Status.Tasks[i].Actions {
			if i == ti && j >= ai {
				break
			}
			if bare(a.Status) != "SUCCESS" {
				return a.Name, true
			}
		}
	}
	return "", false
}

func isLast(wf *tinkv1.Workflow, ti, ai int) bool {
	return ti == len(wf.Status.Tasks)-1 && ai == len(wf.Status.Tasks[ti].Actions)-1
}

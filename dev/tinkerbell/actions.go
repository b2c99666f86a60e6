package tinkerbell

import (
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

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
	State   tinkv1.WorkflowState // as stored
}

// Actions returns the rendered actions of wf in the order the worker runs them; empty until
// tink-controller has rendered it.
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

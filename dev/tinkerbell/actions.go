package tinkerbell

import (
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
)

// Action is one rendered action as the worker or agent runs it: environment and volumes are the
// task's merged with the action's (tink-worker v0.12.2 also binds /workflow, its shared
// directory; tink-agent v0.25 binds only what the Template declares).
type Action struct {
	Task    string
	Name    string
	ID      string // v0.25's action id; empty with v0.12.2
	Image   string
	Command []string
	Env     map[string]string
	Volumes []string
	Pid     string
	Timeout time.Duration
	State   tinkv1.WorkflowState // as stored
}

// Actions returns the rendered actions of wf in the order they run; empty until the controller
// has rendered it.
func Actions(wf *Workflow) []Action {
	var out []Action
	for _, t := range wf.Status.Tasks {
		for _, a := range t.Actions {
			env := make(map[string]string, len(t.Environment)+len(a.Environment))
			for k, v := range t.Environment {
				env[k] = v
			}
			for k, v := range a.Environment {
				env[k] = v
			}
			out = append(out, Action{Task: t.Name, Name: a.Name, ID: a.ID, Image: a.Image, Command: a.Command,
				Env: env, Volumes: append(append([]string(nil), t.Volumes...), a.Volumes...),
				Pid: a.Pid, Timeout: time.Duration(a.Timeout) * time.Second, State: a.ActionState()})
		}
	}
	return out
}

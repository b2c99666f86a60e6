package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// ErrOtherWorkflow is a worker that started a container of a Workflow other than the one it was
// run for (RunWorker).
var ErrOtherWorkflow = errors.New("the worker ran another Workflow")

// ownContainers passes a machine's runner only the containers of its Workflow: the runner
// answers with that Workflow's actions, and must not answer another Workflow's container that
// has the same action name. tink-worker v0.12.2 gives every container of a Workflow its /workflow
// bind (WorkflowBind); tink-agent v0.25 names each container after its action's id, which the
// controller gave the action when it rendered the Workflow (AgentContainerName).
type ownContainers struct {
	wf    string // namespace/name
	owns  func(dockerapi.Container) bool
	whose func(dockerapi.Container) string // the Workflow a container of another belongs to
	next  dockerapi.Runner

	mu    sync.Mutex
	other string // the first container of another Workflow, described
}

// newOwnContainers tells wf's containers for version v; ofAction names the Workflow an action id
// belongs to (v0.25).
func newOwnContainers(wf *Workflow, v Version, ofAction func(id string) string, next dockerapi.Runner) *ownContainers {
	o := &ownContainers{wf: wf.Namespace + "/" + wf.Name, next: next}
	if v == V012 {
		bind := WorkflowBind(wf)
		o.owns = func(c dockerapi.Container) bool { return slices.Contains(c.Binds, bind) }
		o.whose = func(c dockerapi.Container) string { return boundWorkflow(c.Binds) }
		return o
	}
	ids := map[string]bool{}
	for _, a := range Actions(wf) {
		ids[a.ID] = true
	}
	o.owns = func(c dockerapi.Container) bool {
		m := agentContainerID.FindStringSubmatch(c.Name)
		return m != nil && ids[m[1]]
	}
	o.whose = func(c dockerapi.Container) string {
		if m := agentContainerID.FindStringSubmatch(c.Name); m != nil {
			if wf := ofAction(m[1]); wf != "" {
				return wf
			}
			return "(none has action id " + m[1] + ")"
		}
		return "(none: the container's name carries no action id)"
	}
	return o
}

// run is the engine's runner: wf's containers go to next; another Workflow's is noted and left
// running until the engine ends it, so that the worker reports nothing more for it.
func (o *ownContainers) run(ctx context.Context, c dockerapi.Container) (string, int) {
	if o.owns(c) {
		return o.next(ctx, c)
	}
	whose := o.whose(c)
	o.mu.Lock()
	if o.other == "" {
		o.other = fmt.Sprintf("container %s of Workflow %s", c.Name, whose)
	}
	o.mu.Unlock()
	<-ctx.Done()
	return fmt.Sprintf("stopped: this container belongs to Workflow %s, and this machine runs Workflow %s\n", whose, o.wf), 137
}

// err is ErrOtherWorkflow, naming the container, once the worker started another Workflow's.
func (o *ownContainers) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.other == "" {
		return nil
	}
	return fmt.Errorf("%w: the server serves a worker every PENDING or RUNNING Workflow of its id, and the worker started %s before Workflow %s ended; that Workflow is left where the worker put it (its action RUNNING until the controller times it out): let it end, or delete it if it is stale",
		ErrOtherWorkflow, o.other, o.wf)
}

// boundWorkflow is the namespace/name of the Workflow whose /workflow bind is among binds, or the
// binds themselves when none is one.
func boundWorkflow(binds []string) string {
	for _, b := range binds {
		if dir, ok := strings.CutSuffix(b, ":/workflow"); ok {
			if wf, ok := strings.CutPrefix(dir, "/worker/"); ok {
				return wf
			}
		}
	}
	return "(binds " + strings.Join(binds, ", ") + ")"
}

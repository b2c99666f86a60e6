package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// ErrOtherWorkflow is a worker that started a container of a Workflow other than the one it was
// run for (RunWorker).
var ErrOtherWorkflow = errors.New("the worker ran another Workflow")

// ownContainers passes a machine's runner only the containers of its Workflow, told by the
// /workflow bind tink-worker gives them (WorkflowBind): the runner answers with that Workflow's
// actions, and must not answer another Workflow's container that has the same name.
type ownContainers struct {
	wf   string // namespace/name
	bind string
	next dockerapi.Runner

	mu    sync.Mutex
	other string // the first container of another Workflow, described
}

func newOwnContainers(wf *tinkv1.Workflow, next dockerapi.Runner) *ownContainers {
	return &ownContainers{wf: wf.Namespace + "/" + wf.Name, bind: WorkflowBind(wf), next: next}
}

// run is the engine's runner: wf's containers go to next; another Workflow's is noted and left
// running until the engine ends it, so that the worker reports nothing more for it.
func (o *ownContainers) run(ctx context.Context, c dockerapi.Container) (string, int) {
	if slices.Contains(c.Binds, o.bind) {
		return o.next(ctx, c)
	}
	o.mu.Lock()
	if o.other == "" {
		o.other = fmt.Sprintf("container %s of Workflow %s", c.Name, boundWorkflow(c.Binds))
	}
	o.mu.Unlock()
	<-ctx.Done()
	return fmt.Sprintf("stopped: this container belongs to Workflow %s, and this machine runs Workflow %s\n", boundWorkflow(c.Binds), o.wf), 137
}

// err is ErrOtherWorkflow, naming the container, once the worker started another Workflow's.
func (o *ownContainers) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.other == "" {
		return nil
	}
	return fmt.Errorf("%w: tink-server serves a worker every PENDING or RUNNING Workflow of its id, and the worker started %s before Workflow %s ended; that Workflow is left where the worker put it (its action RUNNING until tink-controller times it out): let it end, or delete it if it is stale",
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

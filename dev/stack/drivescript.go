package stack

import (
	"context"
	"fmt"
	"strings"
	"sync"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// script is DriveWorkflow's container runtime and its watch on the Workflow: it answers for the
// machine (run), says when the worker is to stop (stop), and reports each action's state as
// the server recorded it, once and in order (observe).
type script struct {
	ctx    context.Context
	kc     client.Client
	key    client.ObjectKey
	action map[string]string // container name -> action name
	after  map[string]bool   // the actions past a succeeding drive's target
	last   string            // the Workflow's last action
	target string
	d      Drive

	mu      sync.Mutex
	seen    map[string]int    // action -> rank of the state last reported
	outputs map[string]string // action -> the output of its failed container
	beyond  bool              // the worker started an action past the target
}

func newScript(ctx context.Context, kc client.Client, v tinkerbell.Version, wf *tinkerbell.Workflow, target string, d Drive) *script {
	sc := &script{ctx: ctx, kc: kc, key: client.ObjectKeyFromObject(wf),
		action: map[string]string{}, after: map[string]bool{}, target: target, d: d,
		seen: map[string]int{}, outputs: map[string]string{}}
	past := false
	for _, a := range tinkerbell.Actions(wf) {
		sc.action[v.Container(a)] = a.Name
		sc.after[a.Name] = past && !d.Fail
		past = past || a.Name == target
		sc.seen[a.Name] = stateRank(a.State)
		sc.last = a.Name
	}
	return sc
}

// run is one container of the driven Workflow the worker started (tinkerbell.RunWorker passes
// no other Workflow's): the drive's answer for the action.
func (sc *script) run(ctx context.Context, c dockerapi.Container) (string, int) {
	name, ok := sc.action[c.Name]
	if !ok {
		return fmt.Sprintf("fleetsim workflow: container %s is no action of Workflow %s\n", c.Name, sc.key.Name), 1
	}
	wf := &tinkerbell.Workflow{}
	if err := sc.kc.Get(sc.ctx, sc.key, wf); err == nil {
		sc.observe(wf) // the action is RUNNING: the worker reported it before it made the container
	}
	switch {
	case sc.after[name]:
		sc.mu.Lock()
		sc.beyond = true
		sc.mu.Unlock()
		<-ctx.Done()
		return fmt.Sprintf("fleetsim workflow: the machine was stopped after action %s succeeded\n", sc.target), 137
	case sc.d.Fail && name == sc.target:
		sc.mu.Lock()
		sc.outputs[name] = sc.d.Message
		sc.mu.Unlock()
		return sc.d.Message + "\n", 1
	}
	return fmt.Sprintf("fleetsim workflow: action %s succeeded (scripted)\n", name), 0
}

// stop tells RunWorker to stop the worker: a drive that ends at its target saw the target
// succeed and the worker move on to the next action.
func (sc *script) stop(wf *tinkerbell.Workflow) bool {
	sc.observe(wf)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.beyond && sc.seen[sc.target] == rankEnded
}

// observe reports every action whose state moved on since it was last reported, in the
// Workflow's order; a state older than one reported already is not reported again.
func (sc *script) observe(wf *tinkerbell.Workflow) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, a := range tinkerbell.Actions(wf) {
		r := stateRank(a.State)
		if r <= sc.seen[a.Name] {
			continue
		}
		sc.seen[a.Name] = r
		if sc.d.Report != nil {
			sc.d.Report(a.Name, a.State, sc.outputs[a.Name])
		}
	}
}

// result checks that the worker left the Workflow as driven.
func (sc *script) result(wf *tinkerbell.Workflow) error {
	states := map[string]string{}
	var all []string
	for _, a := range tinkerbell.Actions(wf) {
		states[a.Name] = tinkerbell.BareState(a.State)
		all = append(all, a.Name+"="+tinkerbell.BareState(a.State))
	}
	ok := false
	switch {
	case sc.d.Fail:
		ok = tinkerbell.BareState(wf.Status.State) == "FAILED" && states[sc.target] == "FAILED"
	case sc.target == "" || sc.target == sc.last:
		ok = tinkerbell.BareState(wf.Status.State) == "SUCCESS"
	default:
		ok = states[sc.target] == "SUCCESS"
	}
	if !ok {
		return fmt.Errorf("the worker left it %s (%s), not as driven (%s)", wf.Status.State, strings.Join(all, " "), sc.d)
	}
	return nil
}

// The ranks of an action's states: reported once each, in this order.
const (
	rankPending = iota
	rankRunning
	rankEnded
)

func stateRank(s tinkv1.WorkflowState) int {
	switch tinkerbell.BareState(s) {
	case "RUNNING":
		return rankRunning
	case "SUCCESS", "FAILED", "TIMEOUT":
		return rankEnded
	}
	return rankPending
}

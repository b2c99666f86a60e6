package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// Netboot is `fleetsim machine NAME netboot` (docs/design.md §8): the machine boots HookOS and its worker
// runs its current Workflow (the one whose hardwareMap device_1 is its MAC, once tink-controller
// has rendered and prepared it) action after action, reporting each to the
// Kubernetes API as tink-worker does. The first action is the real `fleetd enroll` against the
// machine's swtpm; the others are simulated by image, each writing what it did into the
// machine's log. It returns nil when every action succeeded, and the failing action's error
// otherwise (the Workflow is then failed, as Tinkerbell would have it).
func Netboot(ctx context.Context, info Info, name string, o StepOptions) error {
	mc, err := openMachine(info, name, "netboot", o.Out)
	if err != nil {
		return err
	}
	defer mc.close()
	kc, err := KubeClient(info.Kubeconfig)
	if err != nil {
		return err
	}
	// The worker id is the MAC the machine netboots from: its network card's, which is the one
	// NetBox declares until the card is replaced (SetMAC).
	worker := mc.m
	if worker.MAC != "" {
		if worker.MAC, err = MachineMAC(mc.m); err != nil {
			return fmt.Errorf("netboot %s: %w", name, err)
		}
	}
	wf, err := MachineWorkflow(ctx, kc, info.Namespace, worker)
	if err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if err := tinkerbell.WaitPrepared(ctx, kc, wf); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if s := bareState(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return fmt.Errorf("netboot %s: Workflow %s is %s after tink-controller prepared it; the worker gets only PENDING or RUNNING Workflows", name, wf.Name, wf.Status.State)
	}
	if err := mc.useWorkflowDir(wf.Name); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	mc.say("HookOS booted; worker %s runs Workflow %s (Template %s)", worker.MAC, wf.Name, wf.Spec.TemplateRef)
	tpm, eventLog, err := mc.powerOn(ctx, o.EventLog)
	if err != nil {
		return err
	}
	defer tpm.Stop()
	for _, a := range tinkerbell.Actions(wf) {
		if bareState(a.State) == "SUCCESS" {
			continue
		}
		if err := mc.runReported(ctx, kc, wf, a, tpm, eventLog); err != nil {
			return err
		}
	}
	mc.say("Workflow %s is %s", wf.Name, wf.Status.State)
	return nil
}

// runReported runs one action between its RUNNING report and its SUCCESS, FAILED or TIMEOUT
// report, bounded by the action's timeout.
func (mc *machine) runReported(ctx context.Context, kc client.Client, wf *tinkv1.Workflow, a tinkerbell.Action, tpm *swtpm.Instance, eventLog string) error {
	if err := tinkerbell.ReportAction(ctx, kc, wf, a.Name, tinkv1.WorkflowStateRunning, ""); err != nil {
		return err
	}
	mc.say("action %s (%s) RUNNING", a.Name, a.Image)
	actx := ctx
	if a.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, a.Timeout)
		defer cancel()
	}
	msg, err := mc.runAction(actx, wf, a, tpm, eventLog)
	state := tinkv1.WorkflowStateSuccess
	switch {
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		state, msg = tinkv1.WorkflowStateTimeout, fmt.Sprintf("the action ran longer than its timeout of %s", a.Timeout)
	case err != nil:
		state, msg = tinkv1.WorkflowStateFailed, err.Error()
	}
	// The report must reach the API even when the step's context ended.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if rerr := tinkerbell.ReportAction(rctx, kc, wf, a.Name, state, msg); rerr != nil {
		return errors.Join(err, rerr)
	}
	mc.say("action %s %s: %s", a.Name, bareState(state), msg)
	if state != tinkv1.WorkflowStateSuccess {
		return fmt.Errorf("netboot %s: %w", mc.name, &ActionError{Action: a.Name, State: bareState(state), Message: msg})
	}
	return nil
}

// ActionError is a netboot whose worker ran the Workflow and one of its actions ended FAILED or
// TIMEOUT (a refused enrollment is one): the machine did netboot, the Workflow did not succeed.
type ActionError struct {
	Action, State, Message string
}

func (e *ActionError) Error() string {
	return fmt.Sprintf("action %s %s: %s", e.Action, e.State, e.Message)
}

// MachineWorkflow finds the Workflow a worker with this MAC is served: the oldest one whose
// hardwareMap device_1 is the MAC and that has not ended. Tinkerbell finds it through an index;
// the stack looks first among the Workflows fleetd labelled with the machine's device id (one
// small List), and reads every Workflow of the namespace only when none of those is open, so
// that a netboot does not cost a List of the whole fleet's Workflows.
func MachineWorkflow(ctx context.Context, c client.Client, namespace string, m Machine) (*tinkv1.Workflow, error) {
	if m.MAC == "" {
		return nil, errors.New("the machine has no MAC in NetBox, so no worker id: Tinkerbell serves it nothing")
	}
	for _, opts := range [][]client.ListOption{
		{client.InNamespace(namespace), client.MatchingLabels{workflows.LabelDeviceID: strconv.FormatInt(m.DeviceID, 10)}},
		{client.InNamespace(namespace)},
	} {
		var list tinkv1.WorkflowList
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("list Workflows: %w", err)
		}
		if open := openFor(list.Items, m.MAC); len(open) > 0 {
			return &open[0], nil
		}
	}
	return nil, fmt.Errorf("%w for worker %s: no Workflow waits for this machine; ask for an action in NetBox and let fleetd accept it first", ErrNoWorkflow, m.MAC)
}

// openFor is the Workflows for a worker's MAC that have not ended, oldest first.
func openFor(wfs []tinkv1.Workflow, mac string) []tinkv1.Workflow {
	var open []tinkv1.Workflow
	for _, wf := range wfs {
		s := bareState(wf.Status.State)
		if wf.Spec.HardwareMap[workflows.MapMAC] == mac && (s == "" || s == "PREPARING" || s == "PENDING" || s == "RUNNING") {
			open = append(open, wf)
		}
	}
	sortByCreation(open)
	return open
}

// workflowMarker, in a machine's workflow directory, names the Workflow the directory belongs to.
const workflowMarker = ".workflow"

// useWorkflowDir gives a Workflow its own shared directory, as tink-worker mounts a directory of
// its own at /workflow for each Workflow: the directory of another Workflow is emptied first, and
// a resumed Workflow keeps what its earlier actions wrote.
func (mc *machine) useWorkflowDir(name string) error {
	dir := mc.path(MachineWorkflowDir)
	if b, err := os.ReadFile(filepath.Join(dir, workflowMarker)); err == nil && strings.TrimSpace(string(b)) == name {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("empty the workflow directory for Workflow %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the workflow directory for Workflow %s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(dir, workflowMarker), []byte(name+"\n"), 0o600)
}

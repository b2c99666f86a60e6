package stack

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// ErrNoWorkflow is returned when a device has no Workflow to drive.
var ErrNoWorkflow = errors.New("no Workflow")

// CurrentWorkflow finds the device's current Workflow: the one NetBox's fleet_workflow names,
// or else the newest Workflow labelled with the device's id.
func CurrentWorkflow(ctx context.Context, c client.Client, namespace string, d OwnerDevice) (*tinkerbell.Workflow, error) {
	if name := d.Field("fleet_workflow"); name != "" {
		wf := &tinkerbell.Workflow{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, wf)
		if err == nil {
			return wf, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read Workflow %s of %s: %w", name, d.Name, err)
		}
	}
	wfs, err := DeviceWorkflows(ctx, c, namespace, d.ID)
	if err != nil {
		return nil, err
	}
	if len(wfs) == 0 {
		return nil, fmt.Errorf("device %s: %w: fleet_workflow is %q and no Workflow carries its id; set desired_action (or status decommissioning) and let fleetd accept it first",
			d.Name, ErrNoWorkflow, d.Field("fleet_workflow"))
	}
	return &wfs[len(wfs)-1], nil
}

// DeviceWorkflows lists the Workflows fleetd created for a device (label device-id), oldest
// first.
func DeviceWorkflows(ctx context.Context, c client.Client, namespace string, deviceID int64) ([]tinkerbell.Workflow, error) {
	var list tinkerbell.WorkflowList
	err := c.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{workflows.LabelDeviceID: strconv.FormatInt(deviceID, 10)})
	if err != nil {
		return nil, fmt.Errorf("list Workflows of device %d: %w", deviceID, err)
	}
	sortByCreation(list.Items)
	return list.Items, nil
}

// sortByCreation orders Workflows oldest first (by name within one second).
func sortByCreation(wfs []tinkerbell.Workflow) {
	sort.Slice(wfs, func(i, j int) bool {
		a, b := wfs[i].CreationTimestamp, wfs[j].CreationTimestamp
		if a.Equal(&b) {
			return wfs[i].Name < wfs[j].Name
		}
		return a.Before(&b)
	})
}

// Drive says how DriveWorkflow ends a Workflow.
type Drive struct {
	// Fail fails the Workflow at Action (default: the first action that has not succeeded): its
	// container exits 1 with Message as its output. Otherwise the actions succeed, up to and
	// including Action when it is set.
	Fail    bool
	Action  string
	Message string
	// Report, when set, hears each action's state as the server recorded it, in order: the
	// action's name, its state and, for a failed action, its container's output.
	Report func(action string, state tinkv1.WorkflowState, output string)
}

// DriveWorkflow runs a Workflow as its machine's netboot would, without the machine: once
// the controller has prepared it (tinkerbell.WaitServable), Tinkerbell's own worker (tink-agent,
// or tink-worker v0.12.2), its id the Workflow's hardwareMap MAC, asks the stack's server for work
// and reports each action, and a scripted container runtime (dev/dockerapi) answers for the
// machine: every action up to
// the target exits 0; with Fail the target exits 1 with Message as its output. A drive that ends
// at an action stops the worker once that action has succeeded, as a machine switched off: the
// worker has by then reported the next action RUNNING (it starts it at once), and whoever runs
// the Workflow next (a drive or a netboot) runs that action again, as the server serves it.
//
// What the server would never serve is refused before a worker starts: a Workflow that is not
// PENDING or RUNNING, an action that has succeeded already or does not exist, and a worker id
// that has another open Workflow (the server would serve the worker that one too). The
// machine's worker.log holds the worker's and the containers' log.
func DriveWorkflow(ctx context.Context, info Info, kc client.Client, wf *tinkerbell.Workflow, d Drive) error {
	mc, err := openMachine(info, wf.Spec.HardwareMap[workflows.MapDeviceName], "workflow", nil)
	if err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	defer mc.close()
	if err := tinkerbell.WaitServable(ctx, kc, wf, info.Tinkerbell.ControllerLog); err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	target, err := driveTarget(tinkerbell.Actions(wf), d)
	if err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	mac := wf.Spec.HardwareMap[workflows.MapMAC]
	open, err := workerWorkflows(ctx, kc, wf.Namespace, mac)
	if err == nil {
		err = onlyOpenWorkflow(wf, open)
	}
	if err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	mc.say("worker %s runs Workflow %s with scripted containers, no machine (%s)", mac, wf.Name, d)
	sc := newScript(ctx, kc, info.Tinkerbell.version(), wf, target, d)
	err = runWorker(ctx, info, kc, wf, tinkerbell.RunOptions{ID: mac, Log: mc.path(MachineWorkerLog), Run: sc.run, Stop: sc.stop})
	if err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	sc.observe(wf)
	if err := sc.result(wf); err != nil {
		return fmt.Errorf("drive Workflow %s: %w; see the worker's log %s", wf.Name, err, mc.path(MachineWorkerLog))
	}
	mc.say("Workflow %s is %s", wf.Name, wf.Status.State)
	return nil
}

func (d Drive) String() string {
	verb := "succeed"
	if d.Fail {
		verb = "fail"
	}
	if d.Action != "" {
		verb += " at " + d.Action
	}
	return verb
}

// workerWorkflows lists the namespace's open Workflows for a worker id (openFor), for a drive,
// which refuses to run with another one open (onlyOpenWorkflow).
func workerWorkflows(ctx context.Context, kc client.Client, namespace, mac string) ([]tinkerbell.Workflow, error) {
	var list tinkerbell.WorkflowList
	if err := kc.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list Workflows: %w", err)
	}
	return openFor(list.Items, mac), nil
}

// onlyOpenWorkflow refuses to run wf when open, the open Workflows of its worker id, holds
// another: the server serves a worker every PENDING or RUNNING Workflow of its id and the worker
// runs them one after another (tink v0.12.2 ProcessWorkflowActions, v0.25's GetAction), while the
// stack's machine and a drive's script answer for wf alone (tinkerbell.RunWorker leaves another
// Workflow's containers where the worker put them), so the other Workflow would be left RUNNING.
// Nothing has run when it refuses.
func onlyOpenWorkflow(wf *tinkerbell.Workflow, open []tinkerbell.Workflow) error {
	var others []string
	for _, o := range open {
		if o.Name != wf.Name {
			others = append(others, fmt.Sprintf("%s (state %q)", o.Name, o.Status.State))
		}
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("worker %s has Workflow %s open and also %s, and Tinkerbell's server would serve the worker each of them: let the stale one end, or delete it (kubectl -n %s delete workflow NAME)",
		wf.Spec.HardwareMap[workflows.MapMAC], wf.Name, strings.Join(others, ", "), wf.Namespace)
}

// driveTarget is the action the drive stops at ("" for the end): the named one, which must
// exist and not have succeeded yet, or for a failure the first unfinished action.
func driveTarget(actions []tinkerbell.Action, d Drive) (string, error) {
	var names []string
	for _, a := range actions {
		names = append(names, a.Name)
		if d.Action == a.Name && tinkerbell.BareState(a.State) == "SUCCESS" {
			return "", fmt.Errorf("action %s has succeeded already", a.Name)
		}
		if d.Action == "" && d.Fail && tinkerbell.BareState(a.State) != "SUCCESS" {
			return a.Name, nil
		}
	}
	if d.Action == "" {
		if d.Fail {
			return "", errors.New("every action has succeeded already")
		}
		return "", nil
	}
	for _, n := range names {
		if n == d.Action {
			return n, nil
		}
	}
	return "", fmt.Errorf("it has no action %q (actions: %s)", d.Action, strings.Join(names, ", "))
}

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
func CurrentWorkflow(ctx context.Context, c client.Client, namespace string, d OwnerDevice) (*tinkv1.Workflow, error) {
	if name := d.Field("fleet_workflow"); name != "" {
		wf := &tinkv1.Workflow{}
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
func DeviceWorkflows(ctx context.Context, c client.Client, namespace string, deviceID int64) ([]tinkv1.Workflow, error) {
	var list tinkv1.WorkflowList
	err := c.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{workflows.LabelDeviceID: strconv.FormatInt(deviceID, 10)})
	if err != nil {
		return nil, fmt.Errorf("list Workflows of device %d: %w", deviceID, err)
	}
	sortByCreation(list.Items)
	return list.Items, nil
}

// sortByCreation orders Workflows oldest first (by name within one second).
func sortByCreation(wfs []tinkv1.Workflow) {
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
	// Fail fails the Workflow at Action (default: the first action that has not succeeded)
	// with Message; otherwise the actions succeed, up to and including Action when it is set.
	Fail    bool
	Action  string
	Message string
	// NewSpelling writes the newer Tinkerbell's state names (SUCCESS) instead of tink v0.12's.
	NewSpelling bool
	// Report, when set, hears every report: action name, state, message.
	Report func(action string, state tinkv1.WorkflowState, message string)
}

// DriveWorkflow moves a Workflow as Tinkerbell would: once the stack's tink-controller has
// rendered and prepared it, the worker reports each action RUNNING and then SUCCESS, in order,
// or FAILED at the chosen action (dev/tinkerbell.ReportAction). A Workflow that is not PENDING
// or RUNNING once prepared is refused, as a worker is never served one.
func DriveWorkflow(ctx context.Context, c client.Client, wf *tinkv1.Workflow, d Drive) error {
	var opts []tinkerbell.Option
	if d.NewSpelling {
		opts = append(opts, tinkerbell.NewSpelling())
	}
	if err := tinkerbell.WaitPrepared(ctx, c, wf); err != nil {
		return err
	}
	if s := bareState(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return fmt.Errorf("Workflow %s is %s: a worker runs only PENDING or RUNNING Workflows", wf.Name, wf.Status.State)
	}
	actions := tinkerbell.Actions(wf)
	target, err := driveTarget(actions, d)
	if err != nil {
		return fmt.Errorf("drive Workflow %s: %w", wf.Name, err)
	}
	report := func(action string, state tinkv1.WorkflowState, msg string) error {
		if d.Report != nil {
			d.Report(action, state, msg)
		}
		return tinkerbell.ReportAction(ctx, c, wf, action, state, msg, opts...)
	}
	for _, a := range actions {
		if bareState(a.State) == "SUCCESS" {
			continue
		}
		if bareState(a.State) != "RUNNING" {
			if err := report(a.Name, tinkv1.WorkflowStateRunning, ""); err != nil {
				return err
			}
		}
		if d.Fail && a.Name == target {
			return report(a.Name, tinkv1.WorkflowStateFailed, d.Message)
		}
		msg := d.Message
		if d.Fail {
			msg = "" // the message belongs to the failing action
		}
		if err := report(a.Name, tinkv1.WorkflowStateSuccess, msg); err != nil {
			return err
		}
		if a.Name == target {
			return nil
		}
	}
	return nil
}

// driveTarget is the action the drive stops at ("" for the end): the named one, which must
// exist and not have succeeded yet, or for a failure the first unfinished action.
func driveTarget(actions []tinkerbell.Action, d Drive) (string, error) {
	var names []string
	for _, a := range actions {
		names = append(names, a.Name)
		if d.Action == a.Name && bareState(a.State) == "SUCCESS" {
			return "", fmt.Errorf("action %s has succeeded already", a.Name)
		}
		if d.Action == "" && d.Fail && bareState(a.State) != "SUCCESS" {
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

func bareState(s tinkv1.WorkflowState) string { return strings.TrimPrefix(string(s), "STATE_") }

package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/folly-infra/fleetd/fleet"
)

// Workflow reads a Workflow's progress (docs/design.md §3). A missing Workflow is a wrapped
// fleet.ErrNotFound; any other error means the API server could not be read.
//
// The Workflow is read as unstructured JSON so that both Tinkerbell generations are understood:
// tink v0.12.2 (STATE_SUCCESS, actions[].status, status.templateRending) and the newer
// tinkerbell/tinkerbell (SUCCESS, actions[].state, status.templateRendering,
// status.currentState.actionName); see docs/design.md §3, tink v0.12.2's
// api/v1alpha1/workflow_types.go and tinkerbell/tinkerbell's api/v1alpha1/tinkerbell/workflow.go.
func (in *Installer) Workflow(ctx context.Context, name string) (fleet.WorkflowStatus, error) {
	u, err := in.k.get(ctx, workflowResource, name)
	err = in.observe("get_workflow", err)
	switch {
	case objectNotFound(err):
		return fleet.WorkflowStatus{}, fmt.Errorf("read Workflow %s in namespace %s: %w", name, in.ns, fleet.ErrNotFound)
	case err != nil:
		return fleet.WorkflowStatus{}, fmt.Errorf("read Workflow %s in namespace %s: %w", name, in.ns, err)
	}
	return statusOf(u)
}

// observedStatus is the union of both generations' status fields that fleetd reads.
type observedStatus struct {
	State             string `json:"state"`
	CurrentAction     string `json:"currentAction"`
	TemplateRending   string `json:"templateRending"`   // tink v0.12.2 (sic)
	TemplateRendering string `json:"templateRendering"` // tinkerbell/tinkerbell
	CurrentState      *struct {
		ActionName string `json:"actionName"`
	} `json:"currentState"`
	Conditions []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"conditions"`
	Tasks []struct {
		Actions []struct {
			Name    string `json:"name"`
			Status  string `json:"status"` // tink v0.12.2
			State   string `json:"state"`  // tinkerbell/tinkerbell
			Message string `json:"message"`
		} `json:"actions"`
	} `json:"tasks"`
}

// statusOf converts a Workflow object into fleetd's view of it.
func statusOf(u *unstructured.Unstructured) (fleet.WorkflowStatus, error) {
	raw, err := json.Marshal(u.Object["status"])
	if err != nil {
		return fleet.WorkflowStatus{}, fmt.Errorf("encode status of Workflow %s: %w", u.GetName(), err)
	}
	var st observedStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return fleet.WorkflowStatus{}, fmt.Errorf("decode status of Workflow %s: %w", u.GetName(), err)
	}
	return st.workflowStatus(u.GetName()), nil
}

// blockingConditions are conditions after which Tinkerbell's controller leaves a Workflow where it is
// for ever (PREPARING, or no state at all); fleetd reports them as a failure so that the request
// ends instead of waiting.
var blockingConditions = map[string]bool{
	string(tinkv1.TemplateRenderedSuccess): false, // failed when its status is False
	string(tinkv1.NetbootJobSetupFailed):   true,
	string(tinkv1.NetbootJobFailed):        true,
	"BootJobSetupFailed":                   true,
	"BootJobFailed":                        true,
}

func (st observedStatus) workflowStatus(name string) fleet.WorkflowStatus {
	ws := fleet.WorkflowStatus{Name: name, CurrentAction: st.CurrentAction}
	if ws.CurrentAction == "" && st.CurrentState != nil {
		ws.CurrentAction = st.CurrentState.ActionName
	}
	state := strings.TrimPrefix(st.State, "STATE_")
	switch state {
	case "", "PREPARING", "PENDING":
		ws.Phase = fleet.WorkflowWaiting
	case "RUNNING", "POST":
		ws.Phase = fleet.WorkflowRunning
	case "SUCCESS":
		ws.Phase = fleet.WorkflowSucceeded
	case "FAILED":
		ws.Phase = fleet.WorkflowFailed
	case "TIMEOUT":
		ws.Phase = fleet.WorkflowTimedOut
	default:
		ws.Phase = fleet.WorkflowWaiting
		ws.Message = fmt.Sprintf("unknown Tinkerbell state %q", st.State)
	}
	if ws.Phase == fleet.WorkflowWaiting {
		if msg, blocked := st.blocked(); blocked {
			ws.Phase, ws.Message = fleet.WorkflowFailed, msg
		} else if msg != "" {
			ws.Message = msg
		}
	}
	if ws.Phase == fleet.WorkflowFailed || ws.Phase == fleet.WorkflowTimedOut {
		st.failedAction(&ws)
	}
	return ws
}

// blocked reports a Workflow that will never run: its Template failed to render, or its boot
// job could not be set up or failed. A render that failed only because the controller could not
// read the Template or the Hardware is not blocked: the controller retries it (its cache may
// lag behind fleetd's own writes of the Hardware and the Workflow), and the message says why it
// waits.
func (st observedStatus) blocked() (string, bool) {
	if st.TemplateRending == string(tinkv1.TemplateRenderingFailed) || st.TemplateRendering == string(tinkv1.TemplateRenderingFailed) {
		for _, c := range st.Conditions {
			if c.Type == string(tinkv1.TemplateRenderedSuccess) && c.Message != "" {
				if retried(c.Message) {
					return "Tinkerbell's controller retries: " + c.Message, false
				}
				return c.Message, true
			}
		}
		return "Tinkerbell could not render the Template", true
	}
	for _, c := range st.Conditions {
		failing, known := blockingConditions[c.Type]
		switch {
		case known && failing && c.Status == "True":
			return fmt.Sprintf("%s: %s", c.Type, c.Message), true
		case known && !failing && c.Status == "False":
			return fmt.Sprintf("%s is False: %s", c.Type, c.Message), true
		}
	}
	return "", false
}

// retriedLookups begin the messages the controller writes when it could not read a Workflow's
// Template or Hardware (tink v0.12.2's internal/deprecated/workflow/reconciler.go, v0.25's
// tink/controller/internal/workflow/reconciler.go write the same); it retries those with
// backoff, and renders the Workflow once it reads both.
var retriedLookups = []string{"template not found", "hardware not found", "error getting hardware"}

func retried(msg string) bool {
	for _, p := range retriedLookups {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// agentMessages are the messages tink-agent v0.25 reports for every action, whatever it printed
// (tink/agent/agent.go): they say nothing of why an action failed, so they are no message.
var agentMessages = map[string]bool{"action completed": true, "running action": true}

// failedAction fills the first action whose state is FAILED or TIMEOUT; a global timeout marks
// no action, and then the current action is named.
func (st observedStatus) failedAction(ws *fleet.WorkflowStatus) {
	for _, t := range st.Tasks {
		for _, a := range t.Actions {
			s := a.Status
			if s == "" {
				s = a.State
			}
			s = strings.TrimPrefix(s, "STATE_")
			if s == "FAILED" || s == "TIMEOUT" {
				ws.FailedAction, ws.Message = a.Name, a.Message
				if agentMessages[a.Message] {
					ws.Message = ""
				}
				return
			}
		}
	}
	ws.FailedAction = ws.CurrentAction
	switch {
	case ws.Message != "":
	case ws.Phase == fleet.WorkflowTimedOut:
		ws.Message = "the Workflow's global_timeout passed"
	case ws.FailedAction == "":
		// v0.25's controller fails a Workflow whose boot it cannot prepare (a boot job for a
		// Hardware without a BMC, allowPXE that cannot be set) without a condition that says why.
		ws.Message = failedUnprepared
	}
}

// failedUnprepared is the message of a Workflow that failed before any action ran, for no reason
// its status gives.
const failedUnprepared = "it failed before any action ran: Tinkerbell's controller could not prepare its boot (its log says why)"

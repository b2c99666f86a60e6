package workflows_test

import (
	"context"
	"errors"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
)

// TestWorkflowStates writes each Tinkerbell state, in tink v0.12.2's spelling and in v0.25's,
// and reads it back through the Installer. The status is written with both versions' fields
// (status and state of an action, currentAction and currentState, templateRending and
// templateRendering): the API server keeps those its CRD has (the version the tests run).
func TestWorkflowStates(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tasks := func(status tinkv1.WorkflowState, msg string) []tinkerbell.Task {
		return []tinkerbell.Task{{ID: "t1", Name: "t", WorkerAddr: "3c:ec:ef:4c:4f:54", AgentID: "3c:ec:ef:4c:4f:54", Actions: []tinkerbell.TaskAction{
			{ID: "a1", Name: "fleetd-enroll", Image: "a", Timeout: 1, Status: "STATE_SUCCESS", State: "SUCCESS"},
			{ID: "a2", Name: "wipe", Image: "b", Timeout: 1, Status: status, State: status, Message: msg},
		}}}
	}
	at := func(action string) *tinkerbell.CurrentState { return &tinkerbell.CurrentState{ActionName: action} }
	tests := []struct {
		name   string
		status tinkerbell.WorkflowStatus
		want   fleet.WorkflowStatus
	}{
		{name: "ok/new", want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/preparing", status: tinkerbell.WorkflowStatus{State: "STATE_PREPARING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/preparing-new-spelling", status: tinkerbell.WorkflowStatus{State: "PREPARING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/pending", status: tinkerbell.WorkflowStatus{State: "STATE_PENDING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/pending-new-spelling", status: tinkerbell.WorkflowStatus{State: "PENDING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/running", status: tinkerbell.WorkflowStatus{State: "STATE_RUNNING", CurrentAction: "wipe", CurrentState: at("wipe")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "wipe"}},
		{name: "ok/running-new-spelling", status: tinkerbell.WorkflowStatus{State: "RUNNING", CurrentAction: "wipe", CurrentState: at("wipe")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "wipe"}},
		{name: "ok/post", status: tinkerbell.WorkflowStatus{State: "STATE_POST"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning}},
		{name: "ok/post-new-spelling", status: tinkerbell.WorkflowStatus{State: "POST"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning}},
		{name: "ok/success", status: tinkerbell.WorkflowStatus{State: "STATE_SUCCESS"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}},
		{name: "ok/success-new-spelling", status: tinkerbell.WorkflowStatus{State: "SUCCESS"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}},
		{name: "ok/failed", status: tinkerbell.WorkflowStatus{State: "STATE_FAILED", CurrentAction: "wipe", CurrentState: at("wipe"),
			Tasks: tasks("STATE_FAILED", "2 disks match serial S6B0NL0W123456")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, CurrentAction: "wipe", FailedAction: "wipe", Message: "2 disks match serial S6B0NL0W123456"}},
		{name: "ok/failed-new-spelling", status: tinkerbell.WorkflowStatus{State: "FAILED", CurrentAction: "wipe", CurrentState: at("wipe"),
			Tasks: tasks("FAILED", "exit 1")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, CurrentAction: "wipe", FailedAction: "wipe", Message: "exit 1"}},
		{name: "ok/action-timeout", status: tinkerbell.WorkflowStatus{State: "STATE_TIMEOUT", CurrentAction: "wipe", CurrentState: at("wipe"),
			Tasks: tasks("STATE_TIMEOUT", "Action timed out")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowTimedOut, CurrentAction: "wipe", FailedAction: "wipe", Message: "Action timed out"}},
		{name: "ok/global-timeout-new-spelling", status: tinkerbell.WorkflowStatus{State: "TIMEOUT", CurrentAction: "wipe", CurrentState: at("wipe"),
			Tasks: tasks("RUNNING", "")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowTimedOut, CurrentAction: "wipe", FailedAction: "wipe", Message: "the Workflow's global_timeout passed"}},
		{name: "ok/template-render-failed", status: tinkerbell.WorkflowStatus{TemplateRending: "failed", TemplateRendering: "failed",
			Conditions: []tinkv1.WorkflowCondition{{Type: tinkv1.TemplateRenderedSuccess, Status: "False", Message: "error rendering template: map has no entry for key \"x\""}}},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "error rendering template: map has no entry for key \"x\""}},
		{name: "ok/netboot-job-setup-failed", status: tinkerbell.WorkflowStatus{State: "STATE_PREPARING",
			Conditions: []tinkv1.WorkflowCondition{{Type: tinkv1.NetbootJobSetupFailed, Status: "True", Message: "hardware \"n\" does not have a BMC"}}},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "NetbootJobSetupFailed: hardware \"n\" does not have a BMC"}},
		{name: "ok/unknown-state-waits", status: tinkerbell.WorkflowStatus{State: "STATE_WAITING"},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting, Message: "unknown Tinkerbell state \"STATE_WAITING\""}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "wf-" + string(rune('a'+i)), Namespace: e.ns},
				Spec: tinkv1.WorkflowSpec{TemplateRef: "x"}}
			if err := e.c.Create(ctx, wf); err != nil {
				t.Fatal(err)
			}
			wf.Status = tc.status
			if err := e.c.Status().Update(ctx, wf); err != nil {
				t.Fatal(err)
			}
			got, err := e.in.Workflow(ctx, wf.Name)
			if err != nil {
				t.Fatalf("Workflow: %v", err)
			}
			tc.want.Name = wf.Name
			if got != tc.want {
				t.Errorf("Workflow(%s) = %+v, want %+v", wf.Name, got, tc.want)
			}
		})
	}
	t.Run("refuse/not-found", func(t *testing.T) {
		_, err := e.in.Workflow(ctx, "no-such-workflow")
		if !errors.Is(err, fleet.ErrNotFound) {
			t.Errorf("Workflow of a missing name: %v, want fleet.ErrNotFound", err)
		}
	})
}

package workflows_test

import (
	"context"
	"errors"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/fleet"
)

// TestWorkflowStates writes each Tinkerbell state, in tink v0.12.2's spelling and in the newer
// one, and reads it back through the Installer.
func TestWorkflowStates(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tasks := func(status tinkv1.WorkflowState, msg string) []tinkv1.Task {
		return []tinkv1.Task{{Name: "t", WorkerAddr: "3c:ec:ef:4c:4f:54", Actions: []tinkv1.Action{
			{Name: "fleetd-enroll", Image: "a", Timeout: 1, Status: "STATE_SUCCESS"},
			{Name: "wipe", Image: "b", Timeout: 1, Status: status, Message: msg},
		}}}
	}
	tests := []struct {
		name   string
		status tinkv1.WorkflowStatus
		want   fleet.WorkflowStatus
	}{
		{name: "ok/new", want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/preparing", status: tinkv1.WorkflowStatus{State: "STATE_PREPARING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/preparing-new-spelling", status: tinkv1.WorkflowStatus{State: "PREPARING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/pending", status: tinkv1.WorkflowStatus{State: "STATE_PENDING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/pending-new-spelling", status: tinkv1.WorkflowStatus{State: "PENDING"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
		{name: "ok/running", status: tinkv1.WorkflowStatus{State: "STATE_RUNNING", CurrentAction: "wipe"},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "wipe"}},
		{name: "ok/running-new-spelling", status: tinkv1.WorkflowStatus{State: "RUNNING", CurrentAction: "wipe"},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "wipe"}},
		{name: "ok/post", status: tinkv1.WorkflowStatus{State: "STATE_POST"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning}},
		{name: "ok/post-new-spelling", status: tinkv1.WorkflowStatus{State: "POST"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning}},
		{name: "ok/success", status: tinkv1.WorkflowStatus{State: "STATE_SUCCESS"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}},
		{name: "ok/success-new-spelling", status: tinkv1.WorkflowStatus{State: "SUCCESS"}, want: fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded}},
		{name: "ok/failed", status: tinkv1.WorkflowStatus{State: "STATE_FAILED", CurrentAction: "wipe",
			Tasks: tasks("STATE_FAILED", "2 disks match serial S6B0NL0W123456")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, CurrentAction: "wipe", FailedAction: "wipe", Message: "2 disks match serial S6B0NL0W123456"}},
		{name: "ok/failed-new-spelling", status: tinkv1.WorkflowStatus{State: "FAILED", CurrentAction: "wipe",
			Tasks: tasks("FAILED", "exit 1")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, CurrentAction: "wipe", FailedAction: "wipe", Message: "exit 1"}},
		{name: "ok/action-timeout", status: tinkv1.WorkflowStatus{State: "STATE_TIMEOUT", CurrentAction: "wipe",
			Tasks: tasks("STATE_TIMEOUT", "Action timed out")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowTimedOut, CurrentAction: "wipe", FailedAction: "wipe", Message: "Action timed out"}},
		{name: "ok/global-timeout-new-spelling", status: tinkv1.WorkflowStatus{State: "TIMEOUT", CurrentAction: "wipe",
			Tasks: tasks("RUNNING", "")},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowTimedOut, CurrentAction: "wipe", FailedAction: "wipe", Message: "the Workflow's global_timeout passed"}},
		{name: "ok/template-render-failed", status: tinkv1.WorkflowStatus{TemplateRendering: "failed",
			Conditions: []tinkv1.WorkflowCondition{{Type: tinkv1.TemplateRenderedSuccess, Status: "False", Message: "error rendering template: map has no entry for key \"x\""}}},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "error rendering template: map has no entry for key \"x\""}},
		{name: "ok/netboot-job-setup-failed", status: tinkv1.WorkflowStatus{State: "STATE_PREPARING",
			Conditions: []tinkv1.WorkflowCondition{{Type: tinkv1.NetbootJobSetupFailed, Status: "True", Message: "hardware \"n\" does not have a BMC"}}},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "NetbootJobSetupFailed: hardware \"n\" does not have a BMC"}},
		{name: "ok/unknown-state-waits", status: tinkv1.WorkflowStatus{State: "STATE_WAITING"},
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting, Message: "unknown Tinkerbell state \"STATE_WAITING\""}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wf := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "wf-" + string(rune('a'+i)), Namespace: e.ns},
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

package workflows

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/folly-infra/fleetd/fleet"
)

// TestStatusOfNewerTinkerbell reads status fields that only tinkerbell/tinkerbell writes (the
// v0.12.2 CRD in the test API server prunes them, so they are decoded from JSON here).
func TestStatusOfNewerTinkerbell(t *testing.T) {
	tests := []struct {
		name   string
		status string
		want   fleet.WorkflowStatus
	}{
		{name: "ok/running-current-state", status: `{"state":"RUNNING","currentState":{"actionName":"stream-image","state":"RUNNING"}}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowRunning, CurrentAction: "stream-image"}},
		{name: "ok/failed-action-state", status: `{"state":"FAILED","currentState":{"actionName":"wipe"},
			"tasks":[{"id":"t","agentID":"m","actions":[{"id":"a","name":"fleetd-enroll","state":"SUCCESS"},{"id":"b","name":"wipe","state":"FAILED","message":"no disk with serial X"}]}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, CurrentAction: "wipe", FailedAction: "wipe", Message: "no disk with serial X"}},
		{name: "ok/template-rendering-failed", status: `{"templateRendering":"failed","conditions":[{"type":"TemplateRenderedSuccess","status":"False","message":"bad"}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "bad"}},
		// tink-controller v0.12.2 retries a Workflow whose Hardware or Template it could not read
		// (its cache can lag behind fleetd's writes): fleetd waits, saying why.
		{name: "ok/hardware-not-yet-read", status: `{"templateRendering":"failed","conditions":[{"type":"TemplateRenderedSuccess","status":"False","message":"hardware not found: Hardware.tinkerbell.org \"n\" not found"}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting, Message: `Tinkerbell's controller retries: hardware not found: Hardware.tinkerbell.org "n" not found`}},
		{name: "ok/template-not-yet-read", status: `{"templateRendering":"failed","conditions":[{"type":"TemplateRenderedSuccess","status":"False","message":"template not found"}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting, Message: "Tinkerbell's controller retries: template not found"}},
		{name: "ok/boot-job-failed", status: `{"state":"PREPARING","conditions":[{"type":"BootJobFailed","status":"True","message":"power on failed"}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, Message: "BootJobFailed: power on failed"}},
		{name: "ok/boot-job-running", status: `{"state":"PREPARING","conditions":[{"type":"BootJobRunning","status":"True"}]}`,
			want: fleet.WorkflowStatus{Phase: fleet.WorkflowWaiting}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st map[string]any
			if err := json.Unmarshal([]byte(tc.status), &st); err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetName("wf")
			u.Object["status"] = st
			got, err := statusOf(u)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Name = "wf"
			if got != tc.want {
				t.Errorf("statusOf = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := statusOf(&unstructured.Unstructured{Object: map[string]any{"status": "not an object"}}); err == nil {
		t.Error("statusOf a string status succeeded, want a decode error")
	}
}

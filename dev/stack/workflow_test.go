package stack_test

import (
	"errors"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/stack"
)

// TestWorkflowOutcomes: Tinkerbell's report of a Workflow (through dev/tinkerbell, in either
// spelling of the states) ends the device's request in NetBox (docs/design.md §1 step 5, §2, §3): a failed
// action fails the request with the action and its message; a retirement that fails keeps the
// owner's decommissioning status; an install Workflow that succeeds while the request is still
// pending (the agent never attested) fails it, because nothing was authorized.
func TestWorkflowOutcomes(t *testing.T) {
	needStack(t)
	tests := []struct {
		name        string
		device      string
		request     map[string]any
		drive       stack.Drive
		wantStatus  string
		wantMessage []string
	}{
		{"failed/provision-at-write-image-new-spelling", "extra-005", desired("provision"),
			stack.Drive{Fail: true, Action: "write-image", Message: "image2disk: GET image: 404 Not Found", NewSpelling: true},
			"failed", []string{"failed at action write-image: image2disk: GET image: 404 Not Found"}},
		{"failed/retire-at-wipe-keeps-decommissioning", "extra-006", map[string]any{"status": "decommissioning"},
			stack.Drive{Fail: true, Action: "wipe-disk", Message: "wipe-disk: 2 disks have serial FSIM0021DISK; refusing to choose"},
			"decommissioning", []string{"retire request", "failed at action wipe-disk: wipe-disk: 2 disks have serial"}},
		{"failed/first-action-by-default", "extra-015", desired("wipe"),
			stack.Drive{Fail: true, Message: "fleetd enroll: quote refused"},
			"failed", []string{"failed at action fleetd-enroll: fleetd enroll: quote refused"}},
		{"failed/install-succeeded-but-never-attested", "extra-007", desired("provision"),
			stack.Drive{}, "failed", []string{"succeeded but the machine never attested", "nothing was authorized"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			patch(t, tc.device, tc.request)
			d := waitState(t, tc.device, "pending")
			wf := waitWorkflow(t, tc.device, d.Field("fleet_workflow"))
			if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, tc.drive); err != nil {
				t.Fatalf("drive Workflow %s: %v", wf.Name, err)
			}
			if strings.HasPrefix(string(wf.Status.State), "STATE_") == tc.drive.NewSpelling {
				t.Fatalf("Workflow %s state %q is not in the spelling under test", wf.Name, wf.Status.State)
			}
			d = waitState(t, tc.device, "failed")
			if d.StatusValue() != tc.wantStatus {
				t.Errorf("status = %s, want %s", d.StatusValue(), tc.wantStatus)
			}
			msg := d.Field("fleet_message")
			for _, w := range tc.wantMessage {
				if !strings.Contains(msg, w) {
					t.Errorf("fleet_message %q does not say %q", msg, w)
				}
			}
			j := waitJournal(t, tc.device, 2)
			if len(j) != 2 || j[1].KindValue() != "danger" || j[1].Comments != msg {
				t.Errorf("journal = %+v, want the acceptance, then one danger entry saying %q", j, msg)
			}
		})
	}
}

// failWorkflow fails the named Workflow of a device at action.
func failWorkflow(t testing.TB, device, name, action, message string, newSpelling bool) {
	t.Helper()
	wf := waitWorkflow(t, device, name)
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{Fail: true, Action: action, Message: message,
		NewSpelling: newSpelling}); err != nil {
		t.Fatalf("fail Workflow %s: %v", name, err)
	}
}

// TestDriveWorkflowRefusals: the simulated worker refuses what Tinkerbell's would not do.
func TestDriveWorkflowRefusals(t *testing.T) {
	needStack(t)
	dev := "extra-016"
	ask(t, dev, "wipe")
	d := waitState(t, dev, "pending")
	name := d.Field("fleet_workflow")
	wf := waitWorkflow(t, dev, name)
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{Fail: true, Action: "write-image"}); err == nil ||
		!strings.Contains(err.Error(), `no action "write-image"`) {
		t.Errorf("refuse/unknown-action: got %v, want an error naming the missing action", err)
	}
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{Action: "fleetd-enroll"}); err != nil {
		t.Fatalf("ok/succeed-one-action: %v", err)
	}
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{Fail: true, Action: "fleetd-enroll"}); err == nil ||
		!strings.Contains(err.Error(), "succeeded already") {
		t.Errorf("refuse/fail-finished-action: got %v, want an error saying it succeeded already", err)
	}
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{Fail: true, Message: "boom"}); err != nil {
		t.Fatalf("ok/fail-next-action: %v", err)
	}
	if err := stack.DriveWorkflow(tctx(t), testStack.Kube(), wf, stack.Drive{}); err == nil || !strings.Contains(err.Error(), "FAILED") {
		t.Errorf("refuse/terminal-workflow: got %v, want an error saying the Workflow is FAILED", err)
	}
	got := &tinkv1.Workflow{}
	if err := testStack.Kube().Get(tctx(t), client.ObjectKeyFromObject(wf), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CurrentAction != "wipe-disk" {
		t.Errorf("current action %q, want wipe-disk (the first unfinished action after fleetd-enroll)", got.Status.CurrentAction)
	}
	d = waitState(t, dev, "failed")
	if !strings.Contains(d.Field("fleet_message"), "at action wipe-disk: boom") {
		t.Errorf("fleet_message %q, want the failure at wipe-disk", d.Field("fleet_message"))
	}
	cur, err := stack.CurrentWorkflow(tctx(t), testStack.Kube(), testStack.Info().Namespace, d)
	if err != nil || cur.Name != name {
		t.Errorf("CurrentWorkflow = %v, %v; want %s", cur, err, name)
	}
	if _, err := stack.CurrentWorkflow(tctx(t), testStack.Kube(), testStack.Info().Namespace, device(t, "g2-1")); !errors.Is(err, stack.ErrNoWorkflow) {
		t.Errorf("refuse/no-workflow: CurrentWorkflow of g2-1 = %v, want ErrNoWorkflow", err)
	}
}

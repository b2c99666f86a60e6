package stack_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// TestWorkflowOutcomes: a Workflow run by the stack's Tinkerbell server and a real worker whose
// containers are scripted (stack.DriveWorkflow) ends the device's request in NetBox
// (docs/design.md §1 step 5, §2, §3): a failed action fails the request naming the action
// (Tinkerbell keeps no action output, so fleetd says where it is, and the machine's worker.log
// holds it); a retirement that fails keeps the owner's decommissioning status; an install
// Workflow that succeeds while the request is still pending (the agent never attested) fails it,
// because nothing was authorized.
func TestWorkflowOutcomes(t *testing.T) {
	needStack(t)
	const noOutput = "(Tinkerbell keeps no action output: it is in the log of the machine's worker, tink-agent or tink-worker)"
	tests := []struct {
		name        string
		device      string
		request     map[string]any
		drive       stack.Drive
		wantStatus  string
		wantMessage []string
	}{
		{"failed/provision-at-write-image", "extra-005", desired("provision"),
			stack.Drive{Fail: true, Action: "write-image", Message: "image2disk: GET image: 404 Not Found"},
			"failed", []string{"failed at action write-image " + noOutput}},
		{"failed/retire-at-wipe-keeps-decommissioning", "extra-006", map[string]any{"status": "decommissioning"},
			stack.Drive{Fail: true, Action: "wipe-disk", Message: "wipe-disk: 2 disks have serial FSIM0021DISK; refusing to choose"},
			"decommissioning", []string{"retire request", "failed at action wipe-disk " + noOutput}},
		{"failed/first-action-by-default", "extra-015", desired("wipe"),
			stack.Drive{Fail: true, Message: "fleetd enroll: quote refused"},
			"failed", []string{"failed at action fleetd-enroll " + noOutput}},
		{"failed/install-succeeded-but-never-attested", "extra-007", desired("provision"),
			stack.Drive{}, "failed", []string{"succeeded but the machine never attested", "nothing was authorized"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			patch(t, tc.device, tc.request)
			d := waitState(t, tc.device, "pending")
			wf := waitWorkflow(t, tc.device, d.Field("fleet_workflow"))
			if err := stack.DriveWorkflow(tctx(t), testStack.Info(), testStack.Kube(), wf, tc.drive); err != nil {
				t.Fatalf("drive Workflow %s: %v", wf.Name, err)
			}
			want := "SUCCESS"
			if tc.drive.Fail {
				want = "FAILED"
			}
			if tinkerbell.BareState(wf.Status.State) != want {
				t.Fatalf("Workflow %s is %s, want %s", wf.Name, wf.Status.State, want)
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
			if tc.drive.Fail {
				failed := failedAction(t, wf)
				if !strings.Contains(msg, "Workflow "+wf.Name+" failed at action "+failed+" ") {
					t.Errorf("fleet_message %q does not name Workflow %s and its failed action %s", msg, wf.Name, failed)
				}
				wantOutputLogged(t, tc.device, failed, tc.drive.Message)
			}
		})
	}
}

// failedAction is the one action of wf that failed.
func failedAction(t *testing.T, wf *tinkerbell.Workflow) string {
	t.Helper()
	var failed []string
	for _, a := range tinkerbell.Actions(wf) {
		if tinkerbell.BareState(a.State) == "FAILED" {
			failed = append(failed, a.Name)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("Workflow %s has failed actions %v, want one", wf.Name, failed)
	}
	return failed[0]
}

// wantOutputLogged fails unless the machine's worker.log holds the output of the action's
// container (tink-worker's action_NAME, or tink-agent's tinkerbell_NAME_ID), where fleetd's
// message sends the operator.
func wantOutputLogged(t *testing.T, device, action, output string) {
	t.Helper()
	path := filepath.Join(testStack.Info().Machines[device].Dir, stack.MachineWorkerLog)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	container := regexp.MustCompile(`"container":"(` + regexp.QuoteMeta(tinkerbell.ContainerName(action)) +
		`|` + regexp.QuoteMeta(tinkerbell.AgentContainerName(action, "")) + `[0-9A-Z]+)"`)
	for _, line := range strings.Split(string(b), "\n") {
		if container.MatchString(line) && strings.Contains(line, `"decision":"exited"`) && strings.Contains(line, output) {
			return
		}
	}
	t.Errorf("%s has no line saying container %s exited with output %q", path, container, output)
}

// failWorkflow fails the named Workflow of a device at action.
func failWorkflow(t testing.TB, device, name, action, message string) {
	t.Helper()
	wf := waitWorkflow(t, device, name)
	if err := stack.DriveWorkflow(tctx(t), testStack.Info(), testStack.Kube(), wf, stack.Drive{Fail: true, Action: action, Message: message}); err != nil {
		t.Fatalf("fail Workflow %s: %v", name, err)
	}
}

// TestDriveWorkflowRefusals: a drive refuses, before any worker starts, what Tinkerbell's
// server would not serve, and a drive resumes a Workflow where the real worker left it. A drive and the
// machine's netboot refuse alike a worker id with two open Workflows.
func TestDriveWorkflowRefusals(t *testing.T) {
	needStack(t)
	dev := "extra-016"
	ask(t, dev, "wipe")
	d := waitState(t, dev, "pending")
	name := d.Field("fleet_workflow")
	wf := waitWorkflow(t, dev, name)
	kc, info := testStack.Kube(), testStack.Info()
	workerLog := filepath.Join(info.Machines[dev].Dir, stack.MachineWorkerLog)
	refusedBy := func(t *testing.T, what string, run func() error, want string) {
		t.Helper()
		before := fileSize(t, workerLog)
		if err := run(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", what, err, want)
		}
		if after := fileSize(t, workerLog); after != before {
			t.Errorf("%s: the worker's log grew from %d to %d bytes, want no worker started", what, before, after)
		}
	}
	refused := func(t *testing.T, drive stack.Drive, want string) {
		t.Helper()
		refusedBy(t, "drive "+drive.String(), func() error { return stack.DriveWorkflow(tctx(t), info, kc, wf, drive) }, want)
	}
	t.Run("refuse/unknown-action", func(t *testing.T) {
		refused(t, stack.Drive{Fail: true, Action: "write-image"}, `no action "write-image"`)
	})
	t.Run("refuse/another-open-workflow", func(t *testing.T) {
		// A newer Workflow of the device for its MAC, as fleetd's for a later request would be:
		// the server would serve the worker both, and its machine answers for one. Without the
		// refusal the netboot ran the older one's containers (and, served first, the newer
		// one's) as the older one's actions.
		other := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: wf.Namespace, Name: name + "-other", Labels: wf.Labels},
			Spec: tinkv1.WorkflowSpec{TemplateRef: wf.Spec.TemplateRef, HardwareRef: wf.Spec.HardwareRef, HardwareMap: wf.Spec.HardwareMap}}
		if err := kc.Create(tctx(t), other); err != nil {
			t.Fatal(err)
		}
		want := "has Workflow " + name + " open and also " + other.Name + " (state "
		refused(t, stack.Drive{}, want)
		refusedBy(t, "netboot", func() error { return step(t, stack.Netboot, dev, stack.StepOptions{}) }, want)
		if err := kc.Delete(tctx(t), other); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ok/succeed-one-action", func(t *testing.T) {
		var reports []string
		if err := stack.DriveWorkflow(tctx(t), info, kc, wf, stack.Drive{Action: "fleetd-enroll", Report: reported(&reports)}); err != nil {
			t.Fatal(err)
		}
		// The worker starts the next action as soon as one succeeds: a drive that ends at an
		// action leaves the next one RUNNING, as a machine switched off there would.
		wantActions(t, wf, "RUNNING", "fleetd-enroll=SUCCESS wipe-disk=RUNNING wipe-receipt=PENDING")
		wantReports(t, reports, "fleetd-enroll RUNNING", "fleetd-enroll SUCCESS", "wipe-disk RUNNING")
	})
	t.Run("refuse/fail-finished-action", func(t *testing.T) {
		refused(t, stack.Drive{Fail: true, Action: "fleetd-enroll"}, "succeeded already")
	})
	t.Run("ok/fail-the-running-action", func(t *testing.T) {
		// the server serves the RUNNING action again, and the worker runs it without
		// reporting it RUNNING a second time.
		var reports []string
		if err := stack.DriveWorkflow(tctx(t), info, kc, wf, stack.Drive{Fail: true, Message: "boom", Report: reported(&reports)}); err != nil {
			t.Fatal(err)
		}
		wantActions(t, wf, "FAILED", "fleetd-enroll=SUCCESS wipe-disk=FAILED wipe-receipt=PENDING")
		wantReports(t, reports, "wipe-disk FAILED: boom")
	})
	t.Run("refuse/terminal-workflow", func(t *testing.T) {
		refused(t, stack.Drive{}, "is FAILED once the controller prepared it")
	})
	d = waitState(t, dev, "failed")
	if msg := d.Field("fleet_message"); !strings.Contains(msg, "at action wipe-disk (Tinkerbell keeps no action output") {
		t.Errorf("fleet_message %q, want the failure at wipe-disk", msg)
	}
	wantOutputLogged(t, dev, "wipe-disk", "boom")
	cur, err := stack.CurrentWorkflow(tctx(t), kc, info.Namespace, d)
	if err != nil || cur.Name != name {
		t.Errorf("CurrentWorkflow = %v, %v; want %s", cur, err, name)
	}
	if _, err := stack.CurrentWorkflow(tctx(t), kc, info.Namespace, device(t, "g2-1")); !errors.Is(err, stack.ErrNoWorkflow) {
		t.Errorf("refuse/no-workflow: CurrentWorkflow of g2-1 = %v, want ErrNoWorkflow", err)
	}
}

// reported is a Drive.Report that appends "action state[: output]" to reports.
func reported(reports *[]string) func(string, tinkv1.WorkflowState, string) {
	var mu sync.Mutex
	return func(action string, state tinkv1.WorkflowState, output string) {
		mu.Lock()
		defer mu.Unlock()
		line := action + " " + tinkerbell.BareState(state)
		if output != "" {
			line += ": " + output
		}
		*reports = append(*reports, line)
	}
}

func wantReports(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("the drive reported %q, want %q", got, want)
	}
}

// wantActions fails unless wf, read again, is in state with its actions' states as want says
// (states without v0.12.2's STATE_ prefix).
func wantActions(t *testing.T, wf *tinkerbell.Workflow, state, want string) {
	t.Helper()
	got := &tinkerbell.Workflow{}
	if err := testStack.Kube().Get(tctx(t), client.ObjectKeyFromObject(wf), got); err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, a := range tinkerbell.Actions(got) {
		states = append(states, a.Name+"="+tinkerbell.BareState(a.State))
	}
	if tinkerbell.BareState(got.Status.State) != state || strings.Join(states, " ") != want {
		t.Errorf("Workflow %s is %s with %s, want %s with %s", wf.Name, got.Status.State, strings.Join(states, " "), state, want)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

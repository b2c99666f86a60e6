package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// Tests of Workflows moved by Tinkerbell's own controller (withTinkerbell runs it), run by its
// own server and worker (runWorkflow), or written as they write them (setStatus), here because
// this package already runs the API server; they read the results back through the Installer, as
// fleetd does.

// installed installs agentTemplate for a new device and waits for the controller to render and
// prepare its Workflow.
func installed(t *testing.T, e *env, name string) (*tinkerbell.Workflow, fleet.WorkflowSpec) {
	t.Helper()
	ctx := context.Background()
	e.template(t, "tpl-"+name, agentTemplate)
	s := spec(device(5, name), "tpl-"+name, fleet.ActionWipe, "wipe-"+name)
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatal(err)
	}
	wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: s.Name}}
	if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil {
		t.Fatal(err)
	}
	return wf, s
}

// setStatus writes wf's status directly, as the version's server records a worker's reports (tink
// v0.12.2's internal/server/kubernetes_api_workflow.go, modifyWorkflowState; v0.25's
// tink/server/internal/grpc, ReportActionStatus) or the controller a timeout: the Workflow's
// state, each named action's state and message, in the version's spelling (v0.12.2's
// STATE_-prefixed actions[].status with startedAt once it ran, which its controller's timeout
// checks read; v0.25's bare actions[].state and the current state its server keeps). States are
// given bare ("RUNNING"); spelled as the other version would, with oldSpelling.
func setStatus(t *testing.T, e *env, wf *tinkerbell.Workflow, state string, actions map[string]string, message string, oldSpelling ...bool) {
	t.Helper()
	v012 := version == tinkerbell.V012
	if len(oldSpelling) > 0 && oldSpelling[0] {
		v012 = !v012
	}
	spell := func(s string) tinkv1.WorkflowState {
		if v012 && s != "" {
			return tinkv1.WorkflowState("STATE_" + s)
		}
		return tinkv1.WorkflowState(s)
	}
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			return err
		}
		wf.Status.State = spell(state)
		for ti := range wf.Status.Tasks {
			task := &wf.Status.Tasks[ti]
			for ai := range task.Actions {
				a := &task.Actions[ai]
				st, ok := actions[a.Name]
				if !ok {
					continue
				}
				if st == "FAILED" || st == "TIMEOUT" {
					a.Message = message
				}
				if v012 {
					if a.StartedAt == nil {
						now := metav1.Now()
						a.StartedAt = &now
					}
					a.Status = spell(st)
					continue
				}
				a.State = spell(st)
				wf.Status.CurrentState = &tinkerbell.CurrentState{AgentID: task.AgentID, TaskID: task.ID, ActionID: a.ID,
					State: spell(st), ActionName: a.Name, TaskName: task.Name}
			}
		}
		return e.c.Status().Update(ctx, wf)
	})
	if err != nil {
		t.Fatalf("write the status of Workflow %s: %v", wf.Name, err)
	}
}

// runWorkflow runs wf to its end through the Tinkerbell server (withTinkerbell) and its worker
// with the Workflow's MAC as its id, whose containers all exit 0, and returns the containers the
// worker ran, in order.
func runWorkflow(t *testing.T, e *env, wf *tinkerbell.Workflow) []dockerapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tinkerbell.WaitServable(ctx, e.c, wf, e.ctrlLog); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ran []dockerapi.Container
	log := filepath.Join(t.TempDir(), "worker.log")
	err := tinkerbell.RunWorker(ctx, e.c, wf, tinkerbell.RunOptions{Version: version, Worker: e.worker, Server: e.tinkServer,
		ID: wf.Spec.HardwareMap[workflows.MapMAC], Log: log, ControllerLog: e.ctrlLog,
		Run: func(_ context.Context, c dockerapi.Container) (string, int) {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, c)
			return "ran " + c.Name + "\n", 0
		}})
	if err != nil {
		b, _ := os.ReadFile(log)
		t.Fatalf("run Workflow %s: %v; the worker's log:\n%s", wf.Name, err, b)
	}
	mu.Lock()
	defer mu.Unlock()
	return ran
}

// TestFailedWorkflows: how fleetd reads a Workflow that failed or timed out, with the status
// written as the server and the controller write it: the failed action named, its message when
// one was recorded, and none for the message tink-agent v0.25 reports for every action.
func TestFailedWorkflows(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	tests := []struct {
		name           string
		state, message string // the Workflow's and wipe's state, wipe's message
		wantMessage    string
		want           fleet.WorkflowPhase
	}{
		// tink-server v0.12.2 records no action message (a worker's report carries one, unread).
		{name: "ok/failed", state: "FAILED", want: fleet.WorkflowFailed},
		{name: "ok/failed-with-a-message", state: "FAILED", message: "2 disks have serial S6B0NL0W123456",
			wantMessage: "2 disks have serial S6B0NL0W123456", want: fleet.WorkflowFailed},
		// tink-agent v0.25 reports "action completed" whatever the action printed: no reason.
		{name: "ok/failed-agent-says-nothing", state: "FAILED", message: "action completed", want: fleet.WorkflowFailed},
		// tink-controller v0.12.2's own words for an action past its timeout.
		{name: "ok/timeout", state: "TIMEOUT", message: "Action timed out", wantMessage: "Action timed out", want: fleet.WorkflowTimedOut},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wf, s := installed(t, e, "fail"+string(rune('a'+i)))
			setStatus(t, e, wf, tc.state, map[string]string{"fleetd-enroll": "SUCCESS", "wipe": tc.state}, tc.message)
			got, err := e.in.Workflow(ctx, s.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := fleet.WorkflowStatus{Name: s.Name, Phase: tc.want, FailedAction: "wipe", Message: tc.wantMessage}
			if version == tinkerbell.V025 { // its server records the action a report was for
				want.CurrentAction = "wipe"
			}
			if got != want {
				t.Errorf("Workflow = %+v, want %+v", got, want)
			}
		})
	}
}

// TestControllerBlocks: what Tinkerbell's controller does with a Workflow it cannot render or prepare,
// as fleetd reads it.
func TestControllerBlocks(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	t.Run("ok/template-missing", func(t *testing.T) {
		wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "no-template"},
			Spec: tinkv1.WorkflowSpec{TemplateRef: "gone", HardwareMap: map[string]string{"device_1": "3c:ec:ef:4c:4f:54"}}}
		if err := e.c.Create(ctx, wf); err != nil {
			t.Fatal(err)
		}
		// The controller retries it (the Template may yet be created): fleetd waits, saying why.
		deadline := time.Now().Add(30 * time.Second)
		for wf.Rendering() != tinkv1.TemplateRenderingFailed && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
				t.Fatal(err)
			}
		}
		got, err := e.in.Workflow(ctx, wf.Name)
		if err != nil || got.Phase != fleet.WorkflowWaiting || got.Message != "Tinkerbell's controller retries: template not found" {
			t.Errorf("Workflow = %+v, %v; want waiting because the controller retries the missing Template", got, err)
		}
		tpl := "version: \"0.1\"\nname: late\nglobal_timeout: 60\ntasks:\n  - name: t\n    worker: \"{{.device_1}}\"\n    actions:\n      - name: a\n        image: alpine\n        timeout: 60\n"
		e.template(t, "gone", tpl)
		if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil || tinkerbell.BareState(wf.Status.State) != "PENDING" {
			t.Errorf("once the Template exists: %v, state %q; want the controller to render it PENDING", err, wf.Status.State)
		}
	})
	t.Run("ok/netboot-without-bmc", func(t *testing.T) {
		_, s := installed(t, e, "nobmc")
		wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "netboot-no-bmc"},
			Spec: tinkv1.WorkflowSpec{TemplateRef: s.Template, HardwareRef: s.Device.Name, HardwareMap: map[string]string(nil),
				BootOptions: tinkv1.BootOptions{BootMode: tinkv1.BootModeNetboot}}}
		wf.Spec.HardwareMap = map[string]string{"device_1": "3c:ec:ef:4c:4f:54", "fleetd_url": "u", "device_name": "d",
			"action": "wipe", "disk_serial": "s", "global_timeout": "60", "request": "wipe-nobmc000"}
		if err := e.c.Create(ctx, wf); err != nil {
			t.Fatal(err)
		}
		if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil {
			t.Fatal(err)
		}
		// v0.12.2's controller leaves it PREPARING with a condition saying why; v0.25's fails it
		// and says why only in its log.
		wantState, wantMessage := "PREPARING", "does not have a BMC"
		if version == tinkerbell.V025 {
			wantState, wantMessage = "FAILED", "failed before any action ran: Tinkerbell's controller could not prepare its boot"
		}
		if tinkerbell.BareState(wf.Status.State) != wantState {
			t.Errorf("state %q, want %s (the controller cannot set up the boot job)", wf.Status.State, wantState)
		}
		got, err := e.in.Workflow(ctx, wf.Name)
		if err != nil || got.Phase != fleet.WorkflowFailed || !strings.Contains(got.Message, wantMessage) {
			t.Errorf("Workflow = %+v, %v; want failed, saying %q", got, err, wantMessage)
		}
	})
}

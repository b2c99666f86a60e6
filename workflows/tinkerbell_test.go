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

// Tests of Workflows moved by Tinkerbell's own tink-controller (main_test.go runs it), run by its
// own tink-server and tink-worker (runWorkflow), or written as they write them (setStatus), here
// because this package already runs the API server; they read the results back through the
// Installer, as fleetd does.

// installed installs agentTemplate for a new device and waits for tink-controller to render and
// prepare its Workflow.
func installed(t *testing.T, e *env, name string) (*tinkv1.Workflow, fleet.WorkflowSpec) {
	t.Helper()
	ctx := context.Background()
	e.template(t, "tpl-"+name, agentTemplate)
	s := spec(device(5, name), "tpl-"+name, fleet.ActionWipe, "wipe-"+name)
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatal(err)
	}
	wf := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: s.Name}}
	if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil {
		t.Fatal(err)
	}
	return wf, s
}

// setStatus writes wf's status directly, as tink-server v0.12.2 records a worker's reports
// (internal/server/kubernetes_api_workflow.go, modifyWorkflowState) or tink-controller a timeout:
// the Workflow's state, each named action's state (startedAt set once it ran, which
// tink-controller's timeout checks read) and message. State names are written as given, so a
// test can write the newer Tinkerbell's spelling, which the real v0.12.2 programs never do.
func setStatus(t *testing.T, e *env, wf *tinkv1.Workflow, state tinkv1.WorkflowState, actions map[string]tinkv1.WorkflowState, message string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			return err
		}
		wf.Status.State = state
		for ti := range wf.Status.Tasks {
			for ai := range wf.Status.Tasks[ti].Actions {
				a := &wf.Status.Tasks[ti].Actions[ai]
				st, ok := actions[a.Name]
				if !ok {
					continue
				}
				if a.StartedAt == nil {
					now := metav1.Now()
					a.StartedAt = &now
				}
				a.Status = st
				if strings.HasSuffix(string(st), "FAILED") || strings.HasSuffix(string(st), "TIMEOUT") {
					a.Message = message
				}
			}
		}
		return e.c.Status().Update(ctx, wf)
	})
	if err != nil {
		t.Fatalf("write the status of Workflow %s: %v", wf.Name, err)
	}
}

// withServer runs tink-server for the env's namespace until the test ends.
func withServer(t *testing.T, e *env) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ts, err := tinkerbell.StartServer(context.Background(), tinkerbell.ServerOptions{Binary: serverBin, Kubeconfig: kubeconfig,
		Namespace: e.ns, Log: filepath.Join(dir, "tink-server.log")})
	if err != nil {
		t.Fatal(err)
	}
	e.tinkServer = ts.Addr
	t.Cleanup(func() { ts.Stop() })
}

// runWorkflow runs wf to its end through tink-server (withServer) and a tink-worker with the
// Workflow's MAC as its id, whose containers all exit 0, and returns the containers the worker
// ran, in order.
func runWorkflow(t *testing.T, e *env, wf *tinkv1.Workflow) []dockerapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tinkerbell.WaitServable(ctx, e.c, wf, e.ctrlLog); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ran []dockerapi.Container
	log := filepath.Join(t.TempDir(), "tink-worker.log")
	err := tinkerbell.RunWorker(ctx, e.c, wf, tinkerbell.RunOptions{Worker: workerBin, Server: e.tinkServer,
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
// written as tink-server and tink-controller write it (and once in the newer Tinkerbell's
// spelling): the failed action named, its message when one was recorded.
func TestFailedWorkflows(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	tests := []struct {
		name           string
		state, success tinkv1.WorkflowState // the Workflow's and wipe's state; fleetd-enroll's
		message        string               // wipe's
		want           fleet.WorkflowPhase
	}{
		// tink-server v0.12.2 records no action message (a worker's report carries one, unread).
		{name: "ok/failed", state: tinkv1.WorkflowStateFailed, success: tinkv1.WorkflowStateSuccess, want: fleet.WorkflowFailed},
		{name: "ok/failed-new-spelling", state: "FAILED", success: "SUCCESS", message: "2 disks have serial S6B0NL0W123456", want: fleet.WorkflowFailed},
		// tink-controller's own words for an action past its timeout.
		{name: "ok/timeout", state: tinkv1.WorkflowStateTimeout, success: tinkv1.WorkflowStateSuccess, message: "Action timed out", want: fleet.WorkflowTimedOut},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wf, s := installed(t, e, "fail"+string(rune('a'+i)))
			setStatus(t, e, wf, tc.state, map[string]tinkv1.WorkflowState{"fleetd-enroll": tc.success, "wipe": tc.state}, tc.message)
			got, err := e.in.Workflow(ctx, s.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := fleet.WorkflowStatus{Name: s.Name, Phase: tc.want, FailedAction: "wipe", Message: tc.message}
			if got != want {
				t.Errorf("Workflow = %+v, want %+v", got, want)
			}
		})
	}
}

// TestControllerBlocks: what tink-controller does with a Workflow it cannot render or prepare,
// as fleetd reads it.
func TestControllerBlocks(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	t.Run("ok/template-missing", func(t *testing.T) {
		wf := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "no-template"},
			Spec: tinkv1.WorkflowSpec{TemplateRef: "gone", HardwareMap: map[string]string{"device_1": "3c:ec:ef:4c:4f:54"}}}
		if err := e.c.Create(ctx, wf); err != nil {
			t.Fatal(err)
		}
		// tink-controller retries it (the Template may yet be created): fleetd waits, saying why.
		deadline := time.Now().Add(30 * time.Second)
		for wf.Status.TemplateRendering != tinkv1.TemplateRenderingFailed && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
				t.Fatal(err)
			}
		}
		got, err := e.in.Workflow(ctx, wf.Name)
		if err != nil || got.Phase != fleet.WorkflowWaiting || got.Message != "tink-controller retries: template not found" {
			t.Errorf("Workflow = %+v, %v; want waiting because tink-controller retries the missing Template", got, err)
		}
		tpl := "version: \"0.1\"\nname: late\nglobal_timeout: 60\ntasks:\n  - name: t\n    worker: \"{{.device_1}}\"\n    actions:\n      - name: a\n        image: alpine\n        timeout: 60\n"
		e.template(t, "gone", tpl)
		if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil || wf.Status.State != tinkv1.WorkflowStatePending {
			t.Errorf("once the Template exists: %v, state %q; want tink-controller to render it PENDING", err, wf.Status.State)
		}
	})
	t.Run("ok/netboot-without-bmc", func(t *testing.T) {
		_, s := installed(t, e, "nobmc")
		wf := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "netboot-no-bmc"},
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
		if wf.Status.State != tinkv1.WorkflowStatePreparing {
			t.Errorf("state %q, want STATE_PREPARING (tink-controller cannot set up the boot job)", wf.Status.State)
		}
		got, err := e.in.Workflow(ctx, wf.Name)
		if err != nil || got.Phase != fleet.WorkflowFailed || !strings.Contains(got.Message, "does not have a BMC") {
			t.Errorf("Workflow = %+v, %v; want failed because the Hardware has no BMC", got, err)
		}
	})
}

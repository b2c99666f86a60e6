package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
)

// Tests of Workflows moved by Tinkerbell's own tink-controller (main_test.go runs it) and
// dev/tinkerbell's reports, here because this package already runs the API server; they read the
// results back through the Installer, as fleetd does.

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

func TestSimulatedWorkerFailures(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	tests := []struct {
		name  string
		state tinkv1.WorkflowState
		opts  []tinkerbell.Option
		want  fleet.WorkflowPhase
	}{
		{name: "ok/failed", state: tinkv1.WorkflowStateFailed, want: fleet.WorkflowFailed},
		{name: "ok/failed-new-spelling", state: tinkv1.WorkflowStateFailed, opts: []tinkerbell.Option{tinkerbell.NewSpelling()}, want: fleet.WorkflowFailed},
		{name: "ok/timeout", state: tinkv1.WorkflowStateTimeout, want: fleet.WorkflowTimedOut},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wf, s := installed(t, e, "fail"+string(rune('a'+i)))
			for _, r := range []struct {
				action string
				state  tinkv1.WorkflowState
			}{{"fleetd-enroll", "RUNNING"}, {"fleetd-enroll", "SUCCESS"}, {"wipe", "RUNNING"}, {"wipe", tc.state}} {
				if err := tinkerbell.ReportAction(ctx, e.c, wf, r.action, r.state, "2 disks have serial S6B0NL0W123456", tc.opts...); err != nil {
					t.Fatalf("ReportAction %s %s: %v", r.action, r.state, err)
				}
			}
			got, err := e.in.Workflow(ctx, s.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := fleet.WorkflowStatus{Name: s.Name, Phase: tc.want, CurrentAction: "wipe", FailedAction: "wipe",
				Message: "2 disks have serial S6B0NL0W123456"}
			if got != want {
				t.Errorf("Workflow = %+v, want %+v", got, want)
			}
			err = tinkerbell.ReportAction(ctx, e.c, wf, "wipe", "RUNNING", "")
			if err == nil || !strings.Contains(err.Error(), "only PENDING or RUNNING") {
				t.Errorf("report on a finished Workflow: %v, want a refusal", err)
			}
		})
	}
	t.Run("refuse/out-of-order", func(t *testing.T) {
		wf, _ := installed(t, e, "order")
		err := tinkerbell.ReportAction(ctx, e.c, wf, "wipe", "RUNNING", "")
		if err == nil || !strings.Contains(err.Error(), `"fleetd-enroll" comes before "wipe"`) {
			t.Errorf("report of the second action first: %v, want a refusal", err)
		}
		if err := tinkerbell.ReportAction(ctx, e.c, wf, "format", "RUNNING", ""); err == nil {
			t.Error("report of an unknown action succeeded")
		}
	})
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

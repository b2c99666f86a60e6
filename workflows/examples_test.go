package workflows_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
)

// TestExampleTemplates installs every example Template, has fleetd install a Workflow from it
// (so it passes the Template check), has Tinkerbell's controller render and prepare it, and runs
// it through Tinkerbell's server and real worker, whose containers all succeed: the worker runs
// every action in order, each with the request's shared volume, and the controller's post step
// ends it SUCCESS with allowPXE off again.
func TestExampleTemplates(t *testing.T) {
	tests := []struct {
		template string
		kind     fleet.Kind
		action   fleet.Action
		actions  []string
	}{
		{"talos-provision", fleet.KindTalos, fleet.ActionProvision, []string{"fleetd-enroll", "wipe-disk", "write-image", "talos-meta", "reboot"}},
		{"nixos-image-provision", fleet.KindNixOS, fleet.ActionProvision, []string{"fleetd-enroll", "wipe-disk", "write-image", "write-fetch-secret", "reboot"}},
		{"alpine-image-provision", fleet.KindAlpine, fleet.ActionProvision, []string{"fleetd-enroll", "wipe-disk", "write-image", "write-fetch-secret", "reboot"}},
		{"cloud-init-nocloud-provision", fleet.KindCloudInit, fleet.ActionProvision, []string{"fleetd-enroll", "wipe-disk", "write-image", "write-nocloud-seed", "reboot"}},
		{"attest", fleet.KindTalos, fleet.ActionAttest, []string{"fleetd-enroll", "reboot"}},
		{"wipe", fleet.KindTalos, fleet.ActionWipe, []string{"fleetd-enroll", "wipe-disk", "wipe-receipt"}},
		{"retire", fleet.KindTalos, fleet.ActionRetire, []string{"fleetd-enroll", "wipe-disk", "wipe-receipt", "power-off"}},
	}
	ctx := context.Background()
	e := newControlledEnv(t)
	if err := tinkerbell.InstallTemplates(ctx, e.c, e.ns, exampletemplates.FS); err != nil {
		t.Fatal(err)
	}
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil || len(tpls) != len(tests) {
		t.Fatalf("LoadTemplates: %d Templates, %v; want %d", len(tpls), err, len(tests))
	}
	for i, tc := range tests {
		t.Run("ok/"+tc.template, func(t *testing.T) {
			d := device(int64(100+i), fmt.Sprintf("node-%d", i))
			s := spec(d, tc.template, tc.action, fmt.Sprintf("%s-example%d", tc.action, i))
			s.Class.Kind = tc.kind
			if err := e.in.Install(ctx, s); err != nil {
				t.Fatalf("Install with Template %s: %v", tc.template, err)
			}
			wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: s.Name}}
			if err := tinkerbell.WaitPrepared(ctx, e.c, wf); err != nil {
				t.Fatalf("WaitPrepared: %v", err)
			}
			if pxe := allowPXE(t, e, d.Name); !pxe {
				t.Error("allowPXE false once the controller prepared the Workflow, want true while it runs (toggleAllowNetboot)")
			}
			var names []string
			for _, a := range tinkerbell.Actions(wf) {
				names = append(names, a.Name)
				if a.Timeout <= 0 || a.Env["FLEETD_DEVICE"] != d.Name || a.Env["FLEETD_REQUEST"] != s.Request {
					t.Errorf("action %s: timeout %s, FLEETD_DEVICE %q, FLEETD_REQUEST %q", a.Name, a.Timeout, a.Env["FLEETD_DEVICE"], a.Env["FLEETD_REQUEST"])
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.actions, ",") {
				t.Errorf("actions %v, want %v", names, tc.actions)
			}
			if wf.Status.GlobalTimeout != 3600 {
				t.Errorf("globalTimeout %d, want 3600 (the class's default workflow_timeout)", wf.Status.GlobalTimeout)
			}
			var ran []string
			shared := "/var/lib/fleetd/" + s.Request + ":/fleetd"
			for _, c := range runWorkflow(t, e, wf) {
				ran = append(ran, c.Name)
				if !slices.Contains(c.Binds, shared) {
					t.Errorf("container %s has binds %v, want the request's shared volume %s", c.Name, c.Binds, shared)
				}
			}
			var containers []string
			for _, a := range tinkerbell.Actions(wf) {
				containers = append(containers, version.Container(a))
			}
			if strings.Join(ran, ",") != strings.Join(containers, ",") {
				t.Errorf("the worker ran containers %v, want %v", ran, containers)
			}
			got, err := e.in.Workflow(ctx, s.Name)
			if err != nil || got.Phase != fleet.WorkflowSucceeded {
				t.Errorf("Workflow after every action succeeded: %+v, %v; want succeeded (state %q)", got, err, wf.Status.State)
			}
			if allowPXE(t, e, d.Name) {
				t.Error("allowPXE true after success, want false (toggled off in POST)")
			}
		})
	}
}

func allowPXE(t *testing.T, e *env, name string) bool {
	t.Helper()
	hw := &tinkv1.Hardware{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, hw); err != nil {
		t.Fatal(err)
	}
	p := hw.Spec.Interfaces[0].Netboot.AllowPXE
	return p != nil && *p
}

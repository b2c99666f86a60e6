package workflows_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/kubeharness"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// TestResourceNotServed: while the API server does not serve Tinkerbell's Workflows and
// Templates — as during a restart, until its CRDs are established again — a Workflow is not
// "gone" and a Template not "missing": fleetd's long-lived client, which knows the resources from
// before, gets 404 page not found, and the installer must report an error to retry, never
// fleet.ErrNotFound (which fails a running request) or fleet.ErrTemplate (which fails a new one).
// (Found by the chaos tests, dev/stack/chaos: a request claimed during an API server restart
// failed for a missing Template.) The real API server runs here with only the Hardware CRD.
func TestResourceNotServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := kubeharness.Start(ctx, kubeharness.Options{CRDDir: onlyHardwareCRD(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	})
	// fleetd's client names the resources' paths itself (no discovery), as a long-lived client
	// that learnt them while they were served does.
	in, err := workflows.New(workflows.Config{RESTConfig: srv.RESTConfig(), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	s := spec(device(3, "node-n"), "talos-provision", fleet.ActionProvision, "provision-nnnnnnnn")
	if err := in.Install(ctx, s); err == nil || errors.Is(err, fleet.ErrTemplate) {
		t.Errorf("refuse/install while Workflows are not served: %v, want an error to retry that is not fleet.ErrTemplate", err)
	}
	if _, err := in.Workflow(ctx, s.Name); err == nil || errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("refuse/read a Workflow while Workflows are not served: %v, want an error to retry that is not fleet.ErrNotFound", err)
	}
	// The same reads where the resources are served: a missing object is fleet.ErrNotFound.
	e := newEnv(t)
	if _, err := e.in.Workflow(ctx, s.Name); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("ok/read a missing Workflow: %v, want fleet.ErrNotFound", err)
	}
	if err := e.in.Install(ctx, s); !errors.Is(err, fleet.ErrTemplate) {
		t.Errorf("ok/install with a missing Template: %v, want fleet.ErrTemplate", err)
	}
}

// onlyHardwareCRD is a directory holding tink's Hardware CRD alone.
func onlyHardwareCRD(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tinkerbell/tink").Output()
	if err != nil {
		t.Fatalf("locate tink's CRDs: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "tinkerbell.org_hardware.yaml")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tinkerbell.org_hardware.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

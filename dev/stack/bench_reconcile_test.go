package stack_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/workflows"
)

// reconcileService wires a fleet.Service as `fleetd serve` does (netbox.Client, workflows
// Installer from the kubeconfig), against a new NetBox emulator holding n devices and the stack's Kubernetes API
// in namespace ns. With pending, every device carries a claimed provision request whose
// Workflow exists and has not started.
func reconcileService(b *testing.B, s *stack.Stack, ns string, n int, pending bool, wrap ...func(fleet.Installer) fleet.Installer) (*fleet.Service, *netboxemu.Emulator) {
	b.Helper()
	emu, err := netboxemu.Start(netboxemu.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { emu.Close() })
	schema, err := netbox.LoadSchema(mustOpen(b, s.Info().Dir, "netbox-webhooks.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	// No fleetd listens there: this service is driven directly, not by webhooks.
	if err := emu.LoadSchema(schema, "http://127.0.0.1:9", "bench"); err != nil {
		b.Fatal(err)
	}
	token, err := emu.AddToken(netboxemu.TokenSpec{User: stack.ServiceUser})
	if err != nil {
		b.Fatal(err)
	}
	var wfs []*tinkv1.Workflow
	const req = "provision-bench"
	claimed := func(name string) map[string]any {
		return map[string]any{"fleet_state": "pending", "fleet_request": req, "fleet_workflow": fleet.WorkflowName(name, req)}
	}
	for i := 0; i < n; i++ {
		if !pending {
			benchDevice(b, emu, nil)
			continue
		}
		name, id := benchDevice(b, emu, claimed)
		wfs = append(wfs, benchWorkflow(ns, fleet.WorkflowName(name, req), name, id, req))
	}
	createAll(b, s, wfs)
	nb, err := netbox.New(netbox.Config{URL: emu.URL(), Token: token})
	if err != nil {
		b.Fatal(err)
	}
	// As `fleetd serve` builds it: from the kubeconfig, with the installer's own rate limit.
	rc, err := clientcmd.BuildConfigFromFlags("", s.Info().Kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := workflows.New(workflows.Config{RESTConfig: rc, Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	var installer fleet.Installer = inst
	for _, w := range wrap {
		installer = w(installer)
	}
	catalog, err := fleet.LoadCatalog(classesFile(b))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://127.0.0.1:9"}, fleet.Deps{Inventory: nb, Installer: installer,
		Catalog: catalog, Clock: fleet.SystemClock{}, Random: rand.Reader, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	return svc, emu
}

func mustOpen(b *testing.B, dir, name string) *os.File {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

func benchWorkflow(ns, name, device string, id int64, req string) *tinkv1.Workflow {
	return &tinkv1.Workflow{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			workflows.LabelDeviceID: strconv.FormatInt(id, 10), workflows.LabelRequest: req, workflows.LabelAction: "provision"}},
		Spec: tinkv1.WorkflowSpec{TemplateRef: "talos-provision", HardwareRef: device,
			HardwareMap: map[string]string{workflows.MapMAC: "02:f6:00:00:00:00", workflows.MapDeviceName: device}},
	}
}

// createAll creates the Workflows, a few at a time.
func createAll(b *testing.B, s *stack.Stack, wfs []*tinkv1.Workflow) {
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(8)
	for _, wf := range wfs {
		g.Go(func() error { return s.Kube().Create(ctx, wf) })
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("create the benchmark's Workflows: %v", err)
	}
}

// withoutListing hides the installer's WorkflowLister: the reconcile then reads each Workflow.
func withoutListing(in fleet.Installer) fleet.Installer { return struct{ fleet.Installer }{in} }

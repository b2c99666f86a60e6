package stack_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/workflows"
)

// benchFleet is what reconcileService sets up.
type benchFleet struct {
	ns      string        // the Kubernetes namespace of the installer
	devices int           // how many devices the emulator holds
	pending bool          // every device has a claimed provision whose Workflow exists, not started
	asked   string        // every device's desired_action ("" for none)
	latency time.Duration // the emulator's added latency per request (netboxemu.Config.Latency)
	wrap    func(fleet.Installer) fleet.Installer
}

// reconcileService wires a fleet.Service as `fleetd serve` does (netbox.Client, workflows
// Installer from the kubeconfig), against a new NetBox emulator holding the devices and the
// stack's Kubernetes API in namespace ns (which holds copies of the stack's Templates).
func reconcileService(b *testing.B, s *stack.Stack, f benchFleet) (*fleet.Service, []int64) {
	b.Helper()
	emu, err := netboxemu.Start(netboxemu.Config{Latency: f.latency})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { emu.Close() })
	raw, err := os.ReadFile(filepath.Join(s.Info().Dir, "netbox-webhooks.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	// No fleetd listens there: this service is driven directly, not by webhooks.
	if err := emu.LoadSchema(raw, "http://127.0.0.1:9", "bench"); err != nil {
		b.Fatal(err)
	}
	token, err := emu.AddToken(netboxemu.TokenSpec{User: stack.ServiceUser})
	if err != nil {
		b.Fatal(err)
	}
	var wfs []*tinkerbell.Workflow
	var ids []int64
	const req = "provision-bench"
	fields := func(name string) map[string]any {
		m := map[string]any{}
		if f.asked != "" {
			m["desired_action"] = f.asked
		}
		if f.pending {
			m["fleet_state"], m["fleet_request"], m["fleet_workflow"] = "pending", req, fleet.WorkflowName(name, req)
		}
		return m
	}
	for i := 0; i < f.devices; i++ {
		name, id := benchDevice(b, emu, fields)
		ids = append(ids, id)
		if f.pending {
			wfs = append(wfs, benchWorkflow(f.ns, fleet.WorkflowName(name, req), name, id, req))
		}
	}
	copyTemplates(b, s, f.ns)
	ns := f.ns
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
	if f.wrap != nil {
		installer = f.wrap(installer)
	}
	catalog, err := fleet.LoadCatalog(classesFile(b))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://127.0.0.1:9"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: nb, Installer: installer,
		Catalog: catalog, Clock: fleet.SystemClock{}, Random: rand.Reader, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	return svc, ids
}

func benchWorkflow(ns, name, device string, id int64, req string) *tinkerbell.Workflow {
	return &tinkerbell.Workflow{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			workflows.LabelDeviceID: strconv.FormatInt(id, 10), workflows.LabelRequest: req, workflows.LabelAction: "provision"}},
		Spec: tinkv1.WorkflowSpec{TemplateRef: "talos-provision", HardwareRef: device,
			HardwareMap: map[string]string{workflows.MapMAC: "02:f6:00:00:00:00", workflows.MapDeviceName: device}},
	}
}

// createAll creates the Workflows, a few at a time.
func createAll(b *testing.B, s *stack.Stack, wfs []*tinkerbell.Workflow) {
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

// copyTemplates puts the stack's Templates into namespace ns, once, so that an installer there
// renders the same ones.
func copyTemplates(b *testing.B, s *stack.Stack, ns string) {
	b.Helper()
	var list tinkv1.TemplateList
	if err := s.Kube().List(tctx(b), &list, client.InNamespace(s.Info().Namespace)); err != nil {
		b.Fatal(err)
	}
	for _, t := range list.Items {
		cp := &tinkv1.Template{ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: ns}, Spec: t.Spec}
		if err := s.Kube().Create(tctx(b), cp); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("copy Template %s into %s: %v", t.Name, ns, err)
		}
	}
}

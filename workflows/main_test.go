package workflows_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/kubeharness"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// One API server for the package (each package linking the harness pays its link and CRD
// settle time); every test uses its own namespace.
var server *kubeharness.Server

// ctrlBin is Tinkerbell's own tink-controller (scripts/tools.sh builds it; a missing one fails
// the package). Tests whose Workflows it must render and move start one for their namespace
// (withController): one controller for the whole package would be slowed to a crawl by the
// Workflows other tests create with missing Templates or hand-written states, which it retries
// under one shared rate limit.
var ctrlBin string

// serverBin and workerBin are tink-server and tink-worker, for the tests that run a Workflow
// through Tinkerbell's own worker (withServer, runWorkflow).
var serverBin, workerBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	for _, b := range []struct {
		bin  *string
		name string
	}{{&ctrlBin, "tink-controller"}, {&serverBin, "tink-server"}, {&workerBin, "tink-worker"}} {
		if *b.bin, err = tinkerbell.Tool("..", b.name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	rufio, err := tinkerbell.RufioCRDs(ctx, "..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := kubeharness.Start(ctx, kubeharness.Options{MoreCRDDirs: []string{rufio}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start API server:", err)
		return 1
	}
	defer s.Stop()
	server = s
	return m.Run()
}

// withController runs tink-controller against srv for the env's namespace until the test ends;
// a failed test shows its log.
func withController(t *testing.T, srv *kubeharness.Server, e *env) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctrl, err := tinkerbell.StartController(context.Background(), tinkerbell.ControllerOptions{Binary: ctrlBin,
		Kubeconfig: kubeconfig, Namespace: e.ns, Log: filepath.Join(dir, "tink-controller.log")})
	if err != nil {
		t.Fatal(err)
	}
	e.ctrlLog = ctrl.Log()
	t.Cleanup(func() {
		ctrl.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(ctrl.Log())
			t.Logf("tink-controller's log:\n%s", b)
		}
	})
}

// newControlledEnv is newEnv with tink-controller for its namespace.
func newControlledEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	withController(t, server, e)
	return e
}

var nsCounter atomic.Int64

// env is one test's namespace, installer and raw client.
type env struct {
	ns  string
	in  *workflows.Installer
	c   client.WithWatch
	reg *prometheus.Registry
	// ctrlLog is tink-controller's log (withController), tinkServer tink-server's gRPC address
	// (withServer).
	ctrlLog, tinkServer string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, server.RESTConfig())
}

func newEnvOn(t *testing.T, cfg *rest.Config) *env {
	t.Helper()
	ns := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(ns) > 60 {
		ns = ns[:60]
	}
	ns = strings.TrimRight(strings.ReplaceAll(ns, "_", "-"), "-")
	reg := prometheus.NewRegistry()
	in, err := workflows.New(workflows.Config{RESTConfig: cfg, Namespace: ns,
		Logger: zerolog.New(zerolog.NewTestWriter(t)), Registry: reg})
	if err != nil {
		t.Fatalf("new installer: %v", err)
	}
	s, err := workflows.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, in: in, c: c, reg: reg}
}

// wroteNothing fails the test when the env's namespace holds a Workflow or a Hardware: what
// (an Install that was refused or failed) must have written neither.
func (e *env) wroteNothing(t *testing.T, what string) {
	t.Helper()
	ctx := context.Background()
	var wfs tinkv1.WorkflowList
	var hws tinkv1.HardwareList
	if err := e.c.List(ctx, &wfs, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.List(ctx, &hws, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	if len(wfs.Items) != 0 || len(hws.Items) != 0 {
		t.Errorf("%s left %d Workflows and %d Hardware, want none", what, len(wfs.Items), len(hws.Items))
	}
}

// agentTemplate is a minimal valid Template: the agent, then one more action.
const agentTemplate = `version: "0.1"
name: {{.action}}
global_timeout: 1800
tasks:
  - name: {{.action}}
    worker: "{{.device_1}}"
    volumes: ["/dev:/dev"]
    environment:
      FLEETD_URL: "{{.fleetd_url}}"
      FLEETD_DEVICE: "{{.device_name}}"
      FLEETD_REQUEST: "{{.request}}"
    actions:
      - name: fleetd-enroll
        image: ghcr.io/folly-infra/fleetd-agent:v0.1.0
        timeout: 300
        environment:
          FLEETD_ACTION: enroll
      - name: wipe
        image: docker.io/library/alpine:3.20
        timeout: 600
        environment:
          DISK_SERIAL: "{{.disk_serial}}"
`

func (e *env) template(t *testing.T, name, data string) {
	t.Helper()
	tpl := &tinkv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: tinkv1.TemplateSpec{Data: &data}}
	if err := e.c.Create(context.Background(), tpl); err != nil {
		t.Fatalf("create Template %s: %v", name, err)
	}
}

func device(id int64, name string) fleet.Device {
	return fleet.Device{
		ID: id, Name: name, Status: fleet.StatusPlanned,
		Address:  netip.MustParsePrefix("10.0.7.21/24"),
		MACs:     []fleet.MAC{"3c:ec:ef:4c:4f:54"},
		Declared: fleet.Declaration{Class: "talos-worker", DiskSerial: "S6B0NL0W123456"},
	}
}

func spec(d fleet.Device, template string, action fleet.Action, request string) fleet.WorkflowSpec {
	return fleet.WorkflowSpec{
		Name: fleet.WorkflowName(d.Name, request), Template: template, Device: d, Action: action,
		Request: request, FleetdURL: "https://spore.folly:8443",
		Class: fleet.Class{Name: "talos-worker", Kind: fleet.KindTalos, Installable: true,
			Image:   "https://images.folly/talos-1.11.5-metal-amd64.raw.zst",
			Netboot: fleet.Netboot{ToggleAllowNetboot: true}},
	}
}

// counter reads a counter's value from the test's registry.
func (e *env) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

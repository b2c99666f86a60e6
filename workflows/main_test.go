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
// settle time); every test uses its own namespace. It serves the CRDs of the Tinkerbell version
// FLEETD_TINKERBELL selects (v0.25 unless make test-compat runs the package against v0.12.2).
var server *kubeharness.Server

// version is that Tinkerbell; crds its CRD directories.
var (
	version tinkerbell.Version
	crds    []string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if version, err = tinkerbell.VersionFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A program of the version that is not built fails the package at once.
	for _, n := range version.Tools() {
		if _, err := tinkerbell.Tool("..", n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if crds, err = version.CRDDirs(ctx, ".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := kubeharness.Start(ctx, kubeharness.Options{CRDDir: crds[0], MoreCRDDirs: crds[1:]})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start API server:", err)
		return 1
	}
	server = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the shared API server:", err)
		code = max(code, 1)
	}
	return code
}

// startServer starts an API server of the test's own with the version's CRDs (dir: its data
// directory, "" for a temporary one; port 0 for a free one), stopped when the test ends.
func startServer(t *testing.T, dir string, port int) *kubeharness.Server {
	t.Helper()
	return startServerCRDs(t, crds, dir, port)
}

// startServerCRDs is startServer with the CRDs of the directories dirs.
func startServerCRDs(t *testing.T, dirs []string, dir string, port int) *kubeharness.Server {
	t.Helper()
	s, err := kubeharness.Start(context.Background(), kubeharness.Options{Dir: dir, Port: port, CRDDir: dirs[0], MoreCRDDirs: dirs[1:]})
	if err != nil {
		t.Fatalf("start API server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	})
	return s
}

// withTinkerbell runs the version's Tinkerbell (its controller and server) against srv for the
// env's namespace until the test ends; a failed test shows its logs.
func withTinkerbell(t *testing.T, srv *kubeharness.Server, e *env) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	tb, err := tinkerbell.Start(context.Background(), tinkerbell.Options{Version: version, Root: "..", Kubeconfig: kubeconfig,
		Namespace: e.ns, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e.ctrlLog, e.tinkServer, e.worker = tb.ControllerLog, tb.Addr, tb.Worker
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stop Tinkerbell: %v", err)
		}
		if t.Failed() {
			for _, l := range []string{tb.ControllerLog, tb.ServerLog} {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), b)
				if tb.ServerLog == tb.ControllerLog {
					break
				}
			}
		}
	})
}

// newControlledEnv is newEnv on an API server of the test's own, with the version's Tinkerbell:
// v0.25's controller watches every namespace, so one per test needs a server per test; a
// controller shared by the package would also be slowed to a crawl by the Workflows other tests
// create with missing Templates or hand-written states, which it retries under one shared rate
// limit.
func newControlledEnv(t *testing.T) *env {
	t.Helper()
	srv := startServer(t, "", 0)
	e := newEnvOn(t, srv.RESTConfig())
	withTinkerbell(t, srv, e)
	return e
}

var nsCounter atomic.Int64

// env is one test's namespace, installer and raw client.
type env struct {
	ns  string
	in  *workflows.Installer
	c   client.WithWatch
	reg *prometheus.Registry
	// ctrlLog is the controller's log, tinkServer the server's gRPC address and worker the
	// worker binary (withTinkerbell).
	ctrlLog, tinkServer, worker string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, server.RESTConfig())
}

func newEnvOn(t *testing.T, cfg *rest.Config) *env {
	t.Helper()
	return newEnvClock(t, cfg, nil)
}

// newEnvClock is newEnvOn whose Installer reads clock (nil: the wall clock).
func newEnvClock(t *testing.T, cfg *rest.Config, clock fleet.Clock) *env {
	t.Helper()
	ns := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(ns) > 60 {
		ns = ns[:60]
	}
	ns = strings.TrimRight(strings.ReplaceAll(ns, "_", "-"), "-")
	reg := prometheus.NewRegistry()
	in, err := workflows.New(workflows.Config{RESTConfig: cfg, Namespace: ns, Version: fleetdVersion(),
		Logger: zerolog.New(zerolog.NewTestWriter(t)), Registry: reg, Clock: clock})
	if err != nil {
		t.Fatalf("new installer: %v", err)
	}
	s, err := tinkerbell.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, in: in, c: c, reg: reg}
}

// fleetdVersion is fleetd's kubernetes.tinkerbell_version for the version the tests run.
func fleetdVersion() workflows.Version { return workflows.Version(version.FleetdSetting()) }

// wroteNothing fails the test when the env's namespace holds a Workflow or a Hardware: what
// (an Install that was refused or failed) must have written neither.
func (e *env) wroteNothing(t *testing.T, what string) {
	t.Helper()
	ctx := context.Background()
	var wfs tinkerbell.WorkflowList
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

// agentTemplate is a minimal valid Template: the agent, then one more action, sharing the
// request's directory.
const agentTemplate = `version: "0.1"
name: {{.action}}
global_timeout: 1800
tasks:
  - name: {{.action}}
    worker: "{{.device_1}}"
    volumes: ["/dev:/dev", "/var/lib/fleetd/{{.request}}:/fleetd"]
    environment:
      FLEETD_WORKFLOW_DIR: /fleetd
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

// talosTemplate is agentTemplate with a Talos provision's META step, in the agent's image, which
// a talos-provision Template must have (workflows.CheckFetchSecret).
const talosTemplate = agentTemplate + `      - name: talos-meta
        image: ghcr.io/folly-infra/fleetd-agent:v0.1.0
        timeout: 120
        environment:
          FLEETD_ACTION: talos-meta
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

package render_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// metal is the runtime mode machined validates downloaded configs in (talos ModeMetal).
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

func patch(t *testing.T, s string) json.RawMessage {
	t.Helper()
	if !json.Valid([]byte(s)) {
		t.Fatalf("test patch is not JSON: %s", s)
	}
	return json.RawMessage(s)
}

func withPatches(c fleet.Class, patches ...json.RawMessage) fleet.Class {
	tc := *c.Talos
	tc.Patches = patches
	c.Talos = &tc
	return c
}

func TestRenderTalos(t *testing.T) {
	r := newTestRenderer(t, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	cases := []struct {
		name    string
		class   fleet.Class
		check   func(t *testing.T, m map[string]any)
		machine string
	}{
		{name: "ok/worker", class: talosWorker, machine: "worker"},
		{name: "ok/controlplane", class: talosCP, machine: "controlplane"},
		{name: "ok/class-patches-in-order-node-patch-last", machine: "worker",
			class: withPatches(talosWorker,
				patch(t, `{"machine":{"sysctls":{"vm.swappiness":"10"},"network":{"hostname":"from-class"}}}`),
				patch(t, `{"machine":{"sysctls":{"vm.swappiness":"1"},"install":{"diskSelector":{"serial":"OTHER"}}}}`)),
			check: func(t *testing.T, m map[string]any) {
				if got := dig(m, "machine", "sysctls", "vm.swappiness"); got != "1" {
					t.Errorf("vm.swappiness = %v, want the second patch's 1", got)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := r.Render(d, tc.class, renderID)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if nc.Kind != fleet.KindTalos || nc.ContentType != "application/yaml" {
				t.Errorf("kind %q content type %q", nc.Kind, nc.ContentType)
			}
			// Load the served bytes as machined does and validate them in metal mode.
			p, err := configloader.NewFromBytes(nc.Body)
			if err != nil {
				t.Fatalf("configloader: %v", err)
			}
			if _, err := p.Validate(metal{}); err != nil {
				t.Fatalf("validate in metal mode: %v", err)
			}
			if got := p.Machine().Type().String(); got != tc.machine {
				t.Errorf("machine type %q, want %q", got, tc.machine)
			}
			if got := p.Machine().Network().Hostname(); got != "node-a" {
				t.Errorf("hostname %q, want node-a", got)
			}
			checkInstallDisk(t, p)
			if got := p.Cluster().Endpoint().String(); got != "https://10.0.0.2:6443" {
				t.Errorf("cluster endpoint %q", got)
			}
			m := yamlMap(t, nc.Body)
			if got := dig(m, "machine", "install", "diskSelector", "serial"); got != "S123" {
				t.Errorf("machine.install.diskSelector.serial = %v, want S123", got)
			}
			checkTalosNetwork(t, m)
			if tc.check != nil {
				tc.check(t, m)
			}
			want := "Talos " + tc.machine + " config for node-a (install disk serial S123, 10.0.0.5/24)"
			if nc.Summary != want {
				t.Errorf("summary %q, want %q", nc.Summary, want)
			}
		})
	}
}

// checkInstallDisk evaluates the install disk selector the way Talos does against disks.
func checkInstallDisk(t *testing.T, p config.Provider) {
	t.Helper()
	expr, err := p.Machine().Install().DiskMatchExpression()
	if err != nil || expr == nil {
		t.Fatalf("install disk selector: %v, %v", expr, err)
	}
	for serial, want := range map[string]bool{"S123": true, "S1234": false, "OTHER": false, "": false} {
		got, err := expr.EvalBool(celenv.DiskLocator(), map[string]any{
			"disk":        &blockpb.DiskSpec{Serial: serial, Transport: "nvme", Size: 1 << 40},
			"system_disk": false,
		})
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if got != want {
			t.Errorf("selector %s on a disk with serial %q = %v, want %v", expr, serial, got, want)
		}
	}
}

// yamlMap decodes YAML into generic JSON values.
func yamlMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("decode YAML: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatalf("decode YAML: %v", err)
	}
	return m
}

// dig returns the value at a path of map keys, or nil.
func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func checkTalosNetwork(t *testing.T, m map[string]any) {
	t.Helper()
	ifaces, _ := dig(m, "machine", "network", "interfaces").([]any)
	if len(ifaces) != 1 {
		t.Fatalf("machine.network.interfaces = %v, want one", ifaces)
	}
	iface := ifaces[0].(map[string]any)
	if got := dig(iface, "deviceSelector", "hardwareAddr"); got != "3c:ec:ef:4c:4f:54" {
		t.Errorf("interface selector hardwareAddr = %v", got)
	}
	if got := mustJSON(t, iface["addresses"]); got != `["10.0.0.5/24"]` {
		t.Errorf("interface addresses = %s", got)
	}
	if got := mustJSON(t, iface["routes"]); got != `[{"gateway":"10.0.0.1","network":"0.0.0.0/0"}]` {
		t.Errorf("interface routes = %s", got)
	}
	if got := mustJSON(t, dig(m, "machine", "network", "nameservers")); got != `["10.0.0.1","9.9.9.9"]` {
		t.Errorf("nameservers = %s", got)
	}
	if got := mustJSON(t, dig(m, "machine", "time", "servers")); got != `["spore.lan"]` {
		t.Errorf("time servers = %s", got)
	}
}

func TestRenderTalosRefusesWhatTalosRejects(t *testing.T) {
	r := newTestRenderer(t, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	// A renderer that has served a class's configs already (its templates built and loaded once)
	// refuses as a new one does.
	if _, err := r.Render(d, talosWorker, renderID); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		class fleet.Class
		want  string // Talos's own message
	}{
		{"refuse/api-access-on-worker", withPatches(talosWorker,
			patch(t, `{"machine":{"features":{"kubernetesTalosAPIAccess":{"enabled":true,"allowedRoles":["os:reader"]}}}}`)),
			"feature Kubernetes Talos API Access can only be enabled on control plane machines"},
		{"refuse/bad-node-label", withPatches(talosWorker,
			patch(t, `{"machine":{"nodeLabels":{"bad label!":"x"}}}`)),
			"invalid machine node labels"},
		{"refuse/unknown-field", withPatches(talosCP,
			patch(t, `{"machine":{"kubelett":{"image":"x"}}}`)),
			"load patch 0 of class talos-cp"},
	}
	for _, tc := range cases {
		for _, how := range []struct {
			name   string
			render func(fleet.Device, fleet.Class, fleet.NodeIdentity) (fleet.NodeConfig, error)
		}{{"Render", r.Render}, {"Render-again", r.Render}, {"Check", r.Check}} {
			t.Run(tc.name+"/"+how.name, func(t *testing.T) {
				nc, err := how.render(d, tc.class, renderID)
				if err == nil {
					t.Fatalf("%s returned a config Talos rejects:\n%s", how.name, nc.Body)
				}
				if !errors.Is(err, fleet.ErrConfigRejected) {
					t.Errorf("error does not wrap ErrConfigRejected: %v", err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q does not carry %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "occurred") {
					t.Errorf("error is not one journal line: %q", err)
				}
			})
		}
	}
}

// TestRenderTalosTemplate: a node's config made from its class's template (built and loaded back
// once, by an earlier node's render) is byte for byte what a new renderer makes, and Check
// returns Render's summary and warnings without the body.
func TestRenderTalosTemplate(t *testing.T) {
	a := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	b := renderDevice("node-b", "3c:ec:ef:4c:4f:55", "10.0.0.6/24", "S456")
	patched := withPatches(talosWorker, patch(t, `{"machine":{"sysctls":{"vm.swappiness":"1"}}}`))
	for _, c := range []fleet.Class{talosWorker, talosCP, patched} {
		t.Run("ok/"+c.Name+fmt.Sprint(len(c.Talos.Patches)), func(t *testing.T) {
			warm := newTestRenderer(t, nil)
			if _, err := warm.Render(a, c, renderID); err != nil {
				t.Fatal(err)
			}
			got, err := warm.Render(b, c, renderID)
			if err != nil {
				t.Fatal(err)
			}
			want, err := newTestRenderer(t, nil).Render(b, c, renderID)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Body, want.Body) {
				t.Errorf("node-b's config from the warm template differs from a new renderer's:\n%s\n---\n%s", got.Body, want.Body)
			}
			checked, err := warm.Check(b, c, renderID)
			if err != nil {
				t.Fatal(err)
			}
			if checked.Body != nil || checked.Summary != got.Summary || fmt.Sprint(checked.Warnings) != fmt.Sprint(got.Warnings) ||
				checked.Kind != got.Kind || checked.ContentType != got.ContentType {
				t.Errorf("Check = %+v, want Render's %q %v without the body", checked, got.Summary, got.Warnings)
			}
		})
	}
}

func TestValidateTalosConfig(t *testing.T) {
	cases := []struct {
		name string
		body string
		want string
	}{
		{"refuse/not-yaml", "machine: [", "Talos cannot load it"},
		{"refuse/no-install-in-metal", "version: v1alpha1\nmachine:\n  type: worker\n", `install instructions are required in "metal" mode`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render.ValidateTalosConfig([]byte(tc.body))
			if !errors.Is(err, fleet.ErrConfigRejected) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ValidateTalosConfig = %v, want a rejection saying %q", err, tc.want)
			}
		})
	}
}

// BenchmarkRenderTalos measures one Talos render: generate, patch, encode, reload and validate.
func BenchmarkRenderTalos(b *testing.B) {
	r := newTestRenderer(b, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	c := talosWorker
	c.Talos = &fleet.TalosClass{MachineType: "worker",
		Patches: []json.RawMessage{json.RawMessage(`{"machine":{"sysctls":{"vm.swappiness":"1"}}}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Render(d, c, renderID); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRenderTalosConcurrent renders from one Renderer on several goroutines (the generation input
// is shared); run with -race.
func TestRenderTalosConcurrent(t *testing.T) {
	r := newTestRenderer(t, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := renderDevice(fmt.Sprintf("node-%d", i), fmt.Sprintf("3c:ec:ef:4c:4f:%02x", i), fmt.Sprintf("10.0.0.%d/24", 10+i), "S123")
			nc, err := r.Render(d, talosWorker, renderID)
			if err != nil {
				t.Errorf("Render %s: %v", d.Name, err)
				return
			}
			if got := dig(yamlMap(t, nc.Body), "machine", "network", "hostname"); got != d.Name {
				t.Errorf("hostname %v, want %s", got, d.Name)
			}
		}()
	}
	wg.Wait()
}

// TestTalosCarriesTheDevicesToken: every rendered Talos configuration carries its device's own
// bootstrap token in cluster.token, two devices' differ, and none carries the secrets bundle's
// shared token (docs/design.md §1, "Joining the cluster"); a render with no token of its own is
// refused rather than falling back to the bundle's.
func TestTalosCarriesTheDevicesToken(t *testing.T) {
	r := newTestRenderer(t, nil)
	sec, err := renderSecrets()
	if err != nil {
		t.Fatal(err)
	}
	var bundle map[string]any
	if err := yaml.Unmarshal(sec, &bundle); err != nil {
		t.Fatal(err)
	}
	shared, _ := dig(bundle, "secrets", "bootstraptoken").(string)
	sharedID, _, ok := strings.Cut(shared, ".")
	if !ok || len(sharedID) != 6 {
		t.Fatalf("the secrets bundle's token %q is not id.secret", shared)
	}
	tokens := map[string]fleet.BootstrapToken{
		"node-a": {ID: "aaaaa1", Secret: "aaaaaaaaaaaaaaa1"},
		"node-b": {ID: "bbbbb2", Secret: "bbbbbbbbbbbbbbb2"},
	}
	for _, class := range []fleet.Class{talosWorker, talosCP} {
		for name, tok := range tokens {
			id := renderID
			id.BootstrapToken = tok
			nc, err := r.Render(renderDevice(name, "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123"), class, id)
			if err != nil {
				t.Fatalf("%s %s: %v", class.Name, name, err)
			}
			var m map[string]any
			if err := yaml.Unmarshal(nc.Body, &m); err != nil {
				t.Fatal(err)
			}
			if got := dig(m, "cluster", "token"); got != tok.String() {
				t.Errorf("%s %s: cluster.token = %v, want the device's %s", class.Name, name, got, tok)
			}
			if bytes.Contains(nc.Body, []byte(sharedID)) {
				t.Errorf("%s %s: the configuration carries the secrets bundle's token id %s", class.Name, name, sharedID)
			}
		}
	}
	id := renderID
	id.BootstrapToken = fleet.BootstrapToken{}
	if _, err := r.Render(renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123"), talosWorker, id); err == nil ||
		!strings.Contains(err.Error(), "no bootstrap token of its own") {
		t.Errorf("a render without the device's token: %v, want it refused", err)
	}
}

// TestControlPlaneOfAJoiningClass: a control plane class whose nodes join the cluster gets
// kube-controller-manager without its CSR approver and a 24 h signing duration; a worker class,
// and a control plane outside the cluster fleetd watches, get neither.
func TestControlPlaneOfAJoiningClass(t *testing.T) {
	r := newTestRenderer(t, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	joiningCP, joiningWorker := talosCP, talosWorker
	joiningCP.JoinsKubernetes, joiningWorker.JoinsKubernetes = true, true
	for _, tc := range []struct {
		class fleet.Class
		want  map[string]any
	}{
		{joiningCP, map[string]any{"controllers": "-csrapproving", "cluster-signing-duration": "24h"}},
		{joiningWorker, nil},
		{talosCP, nil},
	} {
		nc, err := r.Render(d, tc.class, renderID)
		if err != nil {
			t.Fatalf("%s (joins %v): %v", tc.class.Name, tc.class.JoinsKubernetes, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(nc.Body, &m); err != nil {
			t.Fatal(err)
		}
		got, _ := dig(m, "cluster", "controllerManager", "extraArgs").(map[string]any)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) && !(len(got) == 0 && tc.want == nil) {
			t.Errorf("%s (joins %v): controllerManager.extraArgs %v, want %v", tc.class.Name, tc.class.JoinsKubernetes, got, tc.want)
		}
	}
}

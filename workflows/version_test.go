package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/workflows"
)

// renderOne renders a Template whose one action's environment holds expr under X, for version v,
// and returns X as rendered.
func renderOne(v workflows.Version, expr string, hw map[string]any) (string, error) {
	text := strings.Replace(agentTemplate, `DISK_SERIAL: "{{.disk_serial}}"`, "X: '"+expr+"'", 1)
	hm := map[string]string{"device_1": "3c:ec:ef:4c:4f:54", "fleetd_url": "u", "device_name": "node-a",
		"request": "wipe-aaaaaaaa", "action": "wipe", "disk_serial": "S1"}
	r, err := workflows.RenderTemplate(v, text, hm, hw)
	if err != nil {
		return "", err
	}
	return r.Tasks[0].Actions[1].Environment["X"], nil
}

// TestRenderVersions: a Template renders with the function set and data of the Tinkerbell version
// the site runs. v0.25's controller (tinkerbell/tinkerbell's template_funcs.go) has sprig's
// hermetic functions only, its own four, the hardware and references keys and a 256 KiB cap;
// v0.12.2's has sprig's whole set and its own formatPartition.
func TestRenderVersions(t *testing.T) {
	hw := map[string]any{"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": "node-a"},
		"spec": map[string]any{"agentID": "agent-7", "disks": []any{map[string]any{"device": "/dev/nvme0n1"}},
			"metadata": map[string]any{"instance": map[string]any{"hostname": "node-a.lan"}}}}
	const (
		v025 = workflows.TinkerbellV025
		v012 = workflows.TinkerbellV012
	)
	tests := []struct {
		name    string
		version workflows.Version
		expr    string
		want    string // the rendered value, or what the error says
		wantErr bool
	}{
		{name: "refuse/v0.25/env is not hermetic", version: v025, expr: `{{ env "HOME" }}`, want: `function "env" not defined`, wantErr: true},
		{name: "refuse/v0.25/now is not hermetic", version: v025, expr: `{{ now }}`, want: `function "now" not defined`, wantErr: true},
		{name: "refuse/v0.25/randAlpha is not hermetic", version: v025, expr: `{{ randAlpha 8 }}`, want: `function "randAlpha" not defined`, wantErr: true},
		{name: "refuse/v0.25/expandenv is not hermetic", version: v025, expr: `{{ expandenv "$HOME" }}`, want: `function "expandenv" not defined`, wantErr: true},
		{name: "ok/v0.12/env is sprig's", version: v012, expr: `{{ if env "FLEETD_NO_SUCH_VAR" }}set{{ else }}unset{{ end }}`, want: "unset"},
		{name: "ok/v0.12/randAlpha is sprig's", version: v012, expr: `{{ randAlpha 8 | len }}`, want: "8"},
		{name: "ok/v0.25/hermetic sprig", version: v025, expr: `{{ "node-a" | upper | trunc 4 }}`, want: "NODE"},
		{name: "ok/v0.25/formatPartition after a digit", version: v025, expr: `{{ formatPartition "/dev/mmcblk0" 2 }}`, want: "/dev/mmcblk0p2"},
		{name: "ok/v0.25/formatPartition of a by-id path", version: v025, expr: `{{ formatPartition "/dev/disk/by-id/nvme-x" 1 }}`, want: "/dev/disk/by-id/nvme-x-part1"},
		{name: "ok/v0.12/formatPartition leaves an unknown scheme", version: v012, expr: `{{ formatPartition "/dev/mmcblk0" 2 }}`, want: "/dev/mmcblk0"},
		{name: "ok/v0.12/formatPartition of nvme", version: v012, expr: `{{ formatPartition "/dev/nvme0n1" 1 }}`, want: "/dev/nvme0n1p1"},
		{name: "ok/v0.25/netmaskToPrefixLength", version: v025, expr: `{{ netmaskToPrefixLength "255.255.255.0" }}`, want: "24"},
		{name: "refuse/v0.12/netmaskToPrefixLength is v0.25's", version: v012, expr: `{{ netmaskToPrefixLength "255.255.255.0" }}`,
			want: `function "netmaskToPrefixLength" not defined`, wantErr: true},
		{name: "ok/v0.25/toYaml and fromYaml", version: v025, expr: `{{ (fromYaml "a: 1\nb: [x]").b | toYaml }}`, want: "- x"},
		{name: "refuse/v0.25/fromYaml of nothing", version: v025, expr: `{{ fromYaml "" }}`, want: "fromYaml: empty YAML input", wantErr: true},
		{name: "ok/v0.25/the hardware key", version: v025, expr: `{{ .hardware.spec.agentID }}/{{ .hardware.spec.metadata.instance.hostname }}`, want: "agent-7/node-a.lan"},
		{name: "ok/v0.25/the legacy Hardware key", version: v025, expr: `{{ index .Hardware.Disks 0 }}`, want: "/dev/nvme0n1"},
		{name: "ok/v0.12/the legacy Hardware key", version: v012, expr: `{{ index .Hardware.Disks 0 }}`, want: "/dev/nvme0n1"},
		{name: "refuse/v0.12/no hardware key", version: v012, expr: `{{ .hardware.spec.agentID }}`, want: `map has no entry for key "hardware"`, wantErr: true},
		{name: "refuse/v0.25/references the controller denies by default", version: v025, expr: `{{ .references.bmc.metadata.name }}`,
			want: `map has no entry for key "bmc"`, wantErr: true},
		{name: "refuse/v0.25/over 256 KiB rendered", version: v025, expr: `{{ repeat 270000 "x" }}`, want: "rendered template exceeds 262144 bytes", wantErr: true},
		{name: "ok/v0.12/no cap", version: v012, expr: `{{ repeat 270000 "x" | len }}`, want: "270000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderOne(tc.version, tc.expr, hw)
			switch {
			case tc.wantErr && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("rendered %q, %v; want an error saying %q", got, err, tc.want)
			case !tc.wantErr && (err != nil || got != tc.want):
				t.Errorf("rendered %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("refuse/an unknown version", func(t *testing.T) {
		if _, err := renderOne("v0.18", "x", nil); err == nil || !strings.Contains(err.Error(), `"v0.18" is not one fleetd knows`) {
			t.Errorf("render for v0.18: %v", err)
		}
	})
	t.Run("ok/one text parsed for each version apart", func(t *testing.T) {
		// v0.12.2 parses a text with env and keeps it; v0.25 still refuses that text.
		for range 2 {
			if _, err := renderOne(v012, `{{ env "X" }}`, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := renderOne(v025, `{{ env "X" }}`, nil); err == nil {
				t.Fatal("v0.25 rendered env once v0.12 had parsed the text")
			}
		}
	})
}

// TestInstallVersionRules: what Install refuses depends on the Tinkerbell version the site runs,
// and runs here against the version the tests run (FLEETD_TINKERBELL). The refusal names what to
// change; nothing is written.
func TestInstallVersionRules(t *testing.T) {
	replace := func(pairs ...string) string { return strings.NewReplacer(pairs...).Replace(agentTemplate) }
	const (
		volume = `, "/var/lib/fleetd/{{.request}}:/fleetd"]`
		dirEnv = "      FLEETD_WORKFLOW_DIR: /fleetd\n"
	)
	tests := []struct {
		name             string
		template         string
		want025, want012 string // "" accepted
	}{
		{name: "non-hermetic function", template: replace(`DISK_SERIAL: "{{.disk_serial}}"`, `DISK_SERIAL: "{{ env "SERIAL" }}"`),
			want025: `it does not render as Tinkerbell v0.25 would render it: parse template: template: workflow-template:23: function "env" not defined`},
		{name: "no shared volume", template: replace(volume, "]"),
			want025: "the agent (action fleetd-enroll) writes its files to /fleetd, which no volume of it mounts: Tinkerbell v0.25's worker shares nothing between actions",
			want012: "the agent (action fleetd-enroll) writes its files to /fleetd, which no volume of it mounts: Tinkerbell v0.12's worker"},
		{name: "the default directory without a volume", template: replace(volume, "]", dirEnv, ""),
			want025: "writes its files to /workflow, which no volume of it mounts"},
		{name: "the default directory on a volume", template: replace(volume, `, "/var/lib/fleetd/{{.request}}:/workflow"]`, dirEnv, ""),
			want012: "declares a volume at /workflow (/var/lib/fleetd/wipe-rrrrrrrr:/workflow), where tink-worker v0.12 mounts its own: Docker refuses the container (Duplicate mount point)"},
		{name: "a volume shared by every request", template: replace("/var/lib/fleetd/{{.request}}:", "/var/lib/fleetd/shared:"),
			want025: "does not name the request wipe-rrrrrrrr in its host directory", want012: "does not name the request wipe-rrrrrrrr"},
		{name: "the volume on the agent only", template: replace(volume, "]", "        environment:\n          FLEETD_ACTION: enroll",
			"        volumes: [\"/var/lib/fleetd/{{.request}}:/fleetd\"]\n        environment:\n          FLEETD_ACTION: enroll"),
			want025: `action wipe does not mount the shared volume /var/lib/fleetd/wipe-rrrrrrrr:/fleetd the agent writes its files to (it has "" there)`,
			want012: "action wipe does not mount the shared volume"},
		{name: "another directory for a later action", template: replace(`DISK_SERIAL: "{{.disk_serial}}"`, `FLEETD_WORKFLOW_DIR: /elsewhere`),
			want025: "action wipe reads its files from FLEETD_WORKFLOW_DIR=/elsewhere, but the agent writes them to /fleetd",
			want012: "action wipe reads its files from FLEETD_WORKFLOW_DIR=/elsewhere"},
	}
	for _, tc := range tests {
		want := tc.want025
		if version == tinkerbell.V012 {
			want = tc.want012
		}
		verdict := "refuse/"
		if want == "" {
			verdict = "ok/"
		}
		t.Run(verdict+tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			e.template(t, "tpl", tc.template)
			s := spec(device(3, "node-r"), "tpl", fleet.ActionWipe, "wipe-rrrrrrrr")
			err := e.in.Install(ctx, s)
			if want == "" {
				if err != nil {
					t.Fatalf("Install for Tinkerbell %s: %v, want it accepted", version, err)
				}
				return
			}
			var refused *workflows.RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, fleet.ErrTemplate) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Install for Tinkerbell %s: %v; want a refusal saying %q", version, err, want)
			}
			e.wroteNothing(t, "refused Install")
		})
	}
}

// TestTemplateRefusedAsTheController: a Template that uses a function v0.25's controller does not
// have (env) is refused by fleetd's check with the very reason that controller gives when it
// renders a Workflow of it (its TemplateRenderedSuccess condition); v0.12.2's controller renders
// it, and fleetd, set for v0.12, accepts it.
func TestTemplateRefusedAsTheController(t *testing.T) {
	ctx := context.Background()
	e := newControlledEnv(t)
	text := strings.Replace(agentTemplate, `DISK_SERIAL: "{{.disk_serial}}"`, `DISK_SERIAL: "{{ env "SERIAL" }}"`, 1)
	e.template(t, "tpl-env", text)
	s := spec(device(9, "node-env"), "tpl-env", fleet.ActionWipe, "wipe-envenvee")
	installErr := e.in.Install(ctx, s)

	// The same Template rendered by the controller, for a Workflow fleetd did not check.
	e.template(t, "tpl-env-direct", text)
	hw := &tinkv1.Hardware{ObjectMeta: metav1.ObjectMeta{Name: "node-env2", Namespace: e.ns},
		Spec: tinkv1.HardwareSpec{Interfaces: []tinkv1.Interface{{DHCP: &tinkv1.DHCP{MAC: "3c:ec:ef:4c:4f:59"}}}}}
	if err := e.c.Create(ctx, hw); err != nil {
		t.Fatal(err)
	}
	direct := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "direct", Namespace: e.ns},
		Spec: tinkv1.WorkflowSpec{TemplateRef: "tpl-env-direct", HardwareRef: "node-env2", HardwareMap: workflows.HardwareMap(s)}}
	if err := e.c.Create(ctx, direct); err != nil {
		t.Fatal(err)
	}
	controllerErr := tinkerbell.WaitPrepared(ctx, e.c, direct)

	if version == tinkerbell.V012 {
		if installErr != nil || controllerErr != nil {
			t.Fatalf("v0.12: fleetd's check %v, the controller %v; want both to render env (sprig's whole set)", installErr, controllerErr)
		}
		return
	}
	if controllerErr == nil {
		t.Fatalf("v0.25's controller rendered a Template with env (state %s)", direct.Status.State)
	}
	// The controller says "error rendering template: failed to parse template with ID direct:
	// err: template: workflow-template:23: function "env" not defined"; the reason is after "err: ".
	_, reason, ok := strings.Cut(controllerErr.Error(), "err: ")
	if !ok || !strings.Contains(reason, `function "env" not defined`) {
		t.Fatalf("the controller's condition: %v; want it to say env is not defined", controllerErr)
	}
	var refused *workflows.RefusedError
	if !errors.As(installErr, &refused) || !strings.Contains(installErr.Error(), reason) {
		t.Errorf("fleetd's check: %v; want a refusal with the controller's reason %q", installErr, reason)
	}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: s.Name}, &tinkerbell.Workflow{}); err == nil {
		t.Errorf("fleetd created Workflow %s of a Template it refused", s.Name)
	}
}

// hardwareGVR is Tinkerbell's Hardware resource.
var hardwareGVR = schema.GroupVersionResource{Group: "tinkerbell.org", Version: "v1alpha1", Resource: "hardware"}

// TestHardwareKeepsOtherFields: fleetd writes a Hardware by a merge patch of the fields it owns,
// so every other field survives, those tink v0.12.2's Go types lack (v0.25's spec.agentID,
// spec.auto, an interface's dhcp.domain_name and isoboot) among them, and the interface it
// rewrites keeps what it does not own. The API server serves v0.25's CRDs (with make
// test-compat's v0.12.2 CRDs a server of the test's own does), which keep those fields.
func TestHardwareKeepsOtherFields(t *testing.T) {
	ctx := context.Background()
	cfg := server.RESTConfig()
	if version != tinkerbell.V025 {
		dirs, err := tinkerbell.V025.CRDDirs(ctx, "..")
		if err != nil {
			t.Fatal(err)
		}
		cfg = startServerCRDs(t, dirs, "", 0).RESTConfig()
	}
	e := newEnvOn(t, cfg)
	e.template(t, "wipe", agentTemplate)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": "node-n", "namespace": e.ns, "labels": map[string]any{"owner": "ops"}},
		"spec": map[string]any{
			"agentID": "3c:ec:ef:4c:4f:54",
			"auto":    map[string]any{"enrollmentEnabled": true},
			"disks":   []any{map[string]any{"device": "/dev/nvme0n1"}},
			"interfaces": []any{map[string]any{
				"dhcp":    map[string]any{"mac": "3c:ec:ef:4c:4f:54", "hostname": "old", "domain_name": "lab.folly", "uefi": true},
				"isoboot": map[string]any{"sourceISO": "https://boot.folly/hook.iso"},
				"netboot": map[string]any{"allowPXE": true},
			}},
		},
	}}
	if _, err := dyn.Resource(hardwareGVR).Namespace(e.ns).Create(ctx, hw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := spec(device(11, "node-n"), "wipe", fleet.ActionWipe, "wipe-nnnnnnnn")
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatalf("Install: %v", err)
	}
	got, err := dyn.Resource(hardwareGVR).Namespace(e.ns).Get(ctx, "node-n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	str := func(path ...string) string {
		if v, ok, _ := unstructured.NestedFieldNoCopy(got.Object, path...); ok {
			return fmt.Sprint(v)
		}
		return "<missing>"
	}
	iface := func(path ...string) string {
		list, _, _ := unstructured.NestedSlice(got.Object, "spec", "interfaces")
		if len(list) != 1 {
			return fmt.Sprintf("<%d interfaces>", len(list))
		}
		if v, ok, _ := unstructured.NestedFieldNoCopy(list[0].(map[string]any), path...); ok {
			return fmt.Sprint(v)
		}
		return "<missing>"
	}
	for _, c := range []struct{ what, got, want string }{
		{"spec.agentID (v0.25)", str("spec", "agentID"), "3c:ec:ef:4c:4f:54"},
		{"spec.auto.enrollmentEnabled (v0.25)", str("spec", "auto", "enrollmentEnabled"), "true"},
		{"spec.disks", fmt.Sprint(str("spec", "disks")), "[map[device:/dev/nvme0n1]]"},
		{"the owner's label", str("metadata", "labels", "owner"), "ops"},
		{"interface dhcp.domain_name (v0.25)", iface("dhcp", "domain_name"), "lab.folly"},
		{"interface isoboot.sourceISO (v0.25)", iface("isoboot", "sourceISO"), "https://boot.folly/hook.iso"},
		{"interface dhcp.uefi", iface("dhcp", "uefi"), "true"},
		{"fleetd's label", str("metadata", "labels", workflows.LabelDeviceID), "11"},
		{"fleetd's hostname", iface("dhcp", "hostname"), "node-n"},
		{"fleetd's address", iface("dhcp", "ip", "address"), "10.0.7.21"},
		{"fleetd's allowWorkflow", iface("netboot", "allowWorkflow"), "true"},
		{"allowPXE, the controller's while the Workflow toggles it", iface("netboot", "allowPXE"), "true"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %s after fleetd wrote the Hardware, want %s", c.what, c.got, c.want)
		}
	}
	if n := e.counter(t, "fleetd_kubernetes_requests_total", map[string]string{"op": "patch_hardware", "outcome": "ok"}); n != 1 {
		t.Errorf("%v Hardware patches, want 1", n)
	}
}

// TestPruneEndedWorkflows: a device's Workflows, one per request over 20 requests, each ended and
// the next an hour and more later, as the periodic reconcile prunes after each pass: a pass marks
// a Workflow it first sees ended, and a pass an hour later deletes it, so after the 20 requests at
// most one ended Workflow of the device remains, the newest. A Workflow that has not ended, one
// whose end fleetd has not recorded (kept), and another user's Workflow without fleetd's label
// stay whatever their age; a kept one is deleted an hour after it is no longer kept.
func TestPruneEndedWorkflows(t *testing.T) {
	ctx := context.Background()
	clock := fleettest.NewClock(time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC))
	e := newEnvClock(t, server.RESTConfig(), clock)
	e.template(t, "wipe", agentTemplate)
	d := device(21, "node-p")
	workflowsOf := func() []string {
		var list tinkerbell.WorkflowList
		if err := e.c.List(ctx, &list, client.InNamespace(e.ns), client.MatchingLabels{workflows.LabelDeviceID: "21"}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, wf := range list.Items {
			names = append(names, wf.Name)
		}
		return names
	}
	end := func(name, state string) {
		wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			t.Fatal(err)
		}
		wf.Status.State = tinkv1.WorkflowState(state)
		if err := e.c.Status().Update(ctx, wf); err != nil {
			t.Fatal(err)
		}
	}
	install := func(req string) string {
		if err := e.in.Install(ctx, spec(d, "wipe", fleet.ActionWipe, req)); err != nil {
			t.Fatal(err)
		}
		return fleet.WorkflowName(d.Name, req)
	}
	prune := func(keep map[string]bool) {
		if err := e.in.PruneWorkflows(ctx, keep); err != nil {
			t.Fatal(err)
		}
	}
	running := install("wipe-running0")
	end(running, "RUNNING") // never ends
	unrecorded := install("wipe-unrecord")
	end(unrecorded, "SUCCESS") // ended, but its device still waits to record it
	stray := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: e.ns}, Spec: tinkv1.WorkflowSpec{TemplateRef: "x"}}
	if err := e.c.Create(ctx, stray); err != nil {
		t.Fatal(err)
	}
	end(stray.Name, "FAILED")
	keep := map[string]bool{unrecorded: true}
	states := []string{"SUCCESS", "FAILED", "TIMEOUT", "STATE_SUCCESS"} // both versions' spellings
	var last string
	for i := range 20 {
		last = install(fmt.Sprintf("wipe-%08d", i))
		end(last, states[i%len(states)])
		prune(keep)
		clock.Advance(61 * time.Minute)
	}
	if got, want := workflowsOf(), []string{last, running, unrecorded}; !sameNames(got, want) {
		t.Errorf("after 20 requests the device has Workflows %v, want %v: the newest ended one, the running one and the one not recorded", got, want)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(stray), &tinkerbell.Workflow{}); err != nil {
		t.Errorf("another user's Workflow: %v, want it kept", err)
	}
	if n := e.counter(t, "fleetd_workflows_pruned_total", nil); n != 19 {
		t.Errorf("fleetd_workflows_pruned_total = %v, want 19", n)
	}
	// Recorded at last: marked by the next pass, deleted by the first an hour later, not before.
	prune(nil)
	clock.Advance(59 * time.Minute)
	prune(nil)
	if got, want := workflowsOf(), []string{running, unrecorded}; !sameNames(got, want) {
		t.Errorf("59 minutes after its end was first seen recorded: Workflows %v, want %v", got, want)
	}
	clock.Advance(time.Minute)
	prune(nil)
	if got, want := workflowsOf(), []string{running}; !sameNames(got, want) {
		t.Errorf("an hour after: Workflows %v, want %v", got, want)
	}
}

func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, n := range a {
		seen[n]++
	}
	for _, n := range b {
		seen[n]--
	}
	for _, c := range seen {
		if c != 0 {
			return false
		}
	}
	return true
}

package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

func TestInstallCreatesHardwareAndWorkflow(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.template(t, "talos-provision", talosTemplate)
	d := device(42, "node-a")
	d.MACs = []fleet.MAC{"3c:ec:ef:4c:4f:54", "3c:ec:ef:4c:4f:55"}
	s := spec(d, "talos-provision", fleet.ActionProvision, "provision-k3f9x2mq")
	s.Class.Timeout = 45 * time.Minute
	if err := e.in.PreviewInstall(ctx, s); err != nil {
		t.Fatalf("PreviewInstall: %v", err)
	}
	var hws tinkv1.HardwareList
	if err := e.c.List(ctx, &hws, client.InNamespace(e.ns)); err != nil || len(hws.Items) != 0 {
		t.Fatalf("PreviewInstall wrote %d Hardware (%v)", len(hws.Items), err)
	}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: s.Name}, &tinkerbell.Workflow{}); err == nil {
		t.Fatal("PreviewInstall created the Workflow")
	}
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatalf("Install: %v", err)
	}

	hw := &tinkv1.Hardware{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "node-a"}, hw); err != nil {
		t.Fatalf("get Hardware: %v", err)
	}
	f, tr := false, true
	wantIfaces := []tinkv1.Interface{{
		DHCP: &tinkv1.DHCP{MAC: "3c:ec:ef:4c:4f:54", Hostname: "node-a",
			IP: &tinkv1.IP{Address: "10.0.7.21", Netmask: "255.255.255.0", Family: 4}},
		Netboot: &tinkv1.Netboot{AllowPXE: &f, AllowWorkflow: &tr},
	}}
	if diff := cmp.Diff(wantIfaces, hw.Spec.Interfaces); diff != "" {
		t.Errorf("Hardware interfaces (-want +got):\n%s", diff)
	}
	if hw.Labels[workflows.LabelDeviceID] != "42" {
		t.Errorf("Hardware labels %v, want %s=42", hw.Labels, workflows.LabelDeviceID)
	}

	wf := &tinkerbell.Workflow{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "node-a-provision-k3f9x2mq"}, wf); err != nil {
		t.Fatalf("get Workflow: %v", err)
	}
	wantSpec := tinkv1.WorkflowSpec{TemplateRef: "talos-provision", HardwareRef: "node-a",
		HardwareMap: map[string]string{
			"device_1": "3c:ec:ef:4c:4f:54", "disk_serial": "S6B0NL0W123456",
			"fleetd_url": "https://spore.folly:8443", "device_name": "node-a", "device_id": "42",
			"request": "provision-k3f9x2mq", "action": "provision", "global_timeout": "2700",
			"image_url": "https://images.folly/talos-1.11.5-metal-amd64.raw.zst"},
		BootOptions: tinkv1.BootOptions{ToggleAllowNetboot: true}}
	if diff := cmp.Diff(wantSpec, wf.Spec); diff != "" {
		t.Errorf("Workflow spec (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{workflows.LabelDeviceID: "42",
		workflows.LabelRequest: "provision-k3f9x2mq", workflows.LabelAction: "provision"}
	if diff := cmp.Diff(wantLabels, wf.Labels); diff != "" {
		t.Errorf("Workflow labels (-want +got):\n%s", diff)
	}
	if got := e.counter(t, "fleetd_workflows_created_total", nil); got != 1 {
		t.Errorf("fleetd_workflows_created_total = %v, want 1", got)
	}
	if got := e.counter(t, "fleetd_kubernetes_requests_total", map[string]string{"op": "create_workflow", "outcome": "ok"}); got != 1 {
		t.Errorf("create_workflow ok requests = %v, want 1", got)
	}
}

// TestInstallUpdatesHardware: fleetd rewrites what it owns (the interface, address, label) and
// keeps what it does not (bmcRef, disks, the controller's allowPXE); with a BMC, a class asking
// for bootMode netboot gets it.
func TestInstallUpdatesHardware(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.template(t, "wipe", agentTemplate)
	on := true
	old := &tinkv1.Hardware{
		ObjectMeta: metav1.ObjectMeta{Name: "node-b", Namespace: e.ns, Labels: map[string]string{"owner": "ops"}},
		Spec: tinkv1.HardwareSpec{
			BMCRef: &corev1.TypedLocalObjectReference{Kind: "Machine", Name: "node-b-bmc"},
			Disks:  []tinkv1.Disk{{Device: "/dev/nvme0n1"}},
			Interfaces: []tinkv1.Interface{{
				DHCP:    &tinkv1.DHCP{MAC: "3c:ec:ef:4c:4f:54", Hostname: "old", UEFI: true, IP: &tinkv1.IP{Address: "10.9.9.9", Gateway: "10.0.7.1"}},
				Netboot: &tinkv1.Netboot{AllowPXE: &on, IPXE: &tinkv1.IPXE{URL: "http://boot/x.ipxe"}},
			}},
		},
	}
	if err := e.c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	s := spec(device(7, "node-b"), "wipe", fleet.ActionWipe, "wipe-aaaaaaaa")
	s.Class.Netboot = fleet.Netboot{ToggleAllowNetboot: true, BootMode: "netboot"}
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatalf("Install: %v", err)
	}
	hw := &tinkv1.Hardware{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(old), hw); err != nil {
		t.Fatal(err)
	}
	tr := true
	want := old.Spec.DeepCopy()
	want.Interfaces[0] = tinkv1.Interface{
		DHCP: &tinkv1.DHCP{MAC: "3c:ec:ef:4c:4f:54", Hostname: "node-b", UEFI: true,
			IP: &tinkv1.IP{Address: "10.0.7.21", Netmask: "255.255.255.0", Gateway: "10.0.7.1", Family: 4}},
		Netboot: &tinkv1.Netboot{AllowPXE: &on, AllowWorkflow: &tr, IPXE: &tinkv1.IPXE{URL: "http://boot/x.ipxe"}},
	}
	if diff := cmp.Diff(*want, hw.Spec); diff != "" {
		t.Errorf("updated Hardware spec (-want +got):\n%s", diff)
	}
	if hw.Labels["owner"] != "ops" || hw.Labels[workflows.LabelDeviceID] != "7" {
		t.Errorf("Hardware labels %v, want owner=ops kept and device id 7 added", hw.Labels)
	}
	wf := &tinkerbell.Workflow{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: s.Name}, wf); err != nil {
		t.Fatal(err)
	}
	if wf.Spec.BootOptions != (tinkv1.BootOptions{BootMode: tinkv1.BootModeNetboot, ToggleAllowNetboot: true}) {
		t.Errorf("bootOptions %+v, want bootMode netboot with toggle (the Hardware has a BMC)", wf.Spec.BootOptions)
	}
}

func TestInstallNetbootWithoutBMCToggles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.template(t, "wipe", agentTemplate)
	s := spec(device(8, "node-c"), "wipe", fleet.ActionWipe, "wipe-bbbbbbbb")
	s.Class.Netboot = fleet.Netboot{ToggleAllowNetboot: false, BootMode: "netboot"}
	if err := e.in.Install(ctx, s); err != nil {
		t.Fatalf("Install: %v", err)
	}
	wf := &tinkerbell.Workflow{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: s.Name}, wf); err != nil {
		t.Fatal(err)
	}
	if wf.Spec.BootOptions != (tinkv1.BootOptions{ToggleAllowNetboot: true}) {
		t.Errorf("bootOptions %+v, want only toggleAllowNetboot (no BMC on the Hardware)", wf.Spec.BootOptions)
	}
}

// TestInstallConcurrentCreatesOneWorkflow: 20 concurrent Installs of one request all succeed
// and leave exactly one Workflow.
func TestInstallConcurrentCreatesOneWorkflow(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.template(t, "talos-provision", talosTemplate)
	s := spec(device(9, "node-d"), "talos-provision", fleet.ActionProvision, "provision-cccccccc")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.in.Install(ctx, s) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Install #%d: %v", i, err)
		}
	}
	list := &tinkerbell.WorkflowList{}
	if err := e.c.List(ctx, list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != s.Name {
		t.Fatalf("%d Workflows after 20 concurrent Installs, want exactly %s", len(list.Items), s.Name)
	}
	if got := e.counter(t, "fleetd_workflows_created_total", nil); got != 1 {
		t.Errorf("fleetd_workflows_created_total = %v, want 1", got)
	}
	if err := e.in.Install(ctx, s); err != nil {
		t.Errorf("Install after the Workflow exists: %v, want nil", err)
	}
	// A request installed before is not refused for what its Template became since: Install
	// reads the Workflow only then, and finds it.
	tpl := &tinkv1.Template{}
	tpl.Name, tpl.Namespace = "talos-provision", e.ns
	if err := e.c.Delete(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	if err := e.in.Install(ctx, s); err != nil {
		t.Errorf("Install after the Workflow exists and its Template is gone: %v, want nil", err)
	}
	other := spec(device(10, "node-d2"), "talos-provision", fleet.ActionProvision, "provision-cccccccd")
	if err := e.in.Install(ctx, other); !errors.Is(err, fleet.ErrTemplate) {
		t.Errorf("refuse/a new request on the deleted Template: %v, want fleet.ErrTemplate", err)
	}
	if err := e.c.List(ctx, list, client.InNamespace(e.ns)); err != nil || len(list.Items) != 1 {
		t.Errorf("%d Workflows (%v) after the Installs on a deleted Template, want the one", len(list.Items), err)
	}
}

func TestInstallAPIUnreachableIsNotARefusal(t *testing.T) {
	in, err := workflows.New(workflows.Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "x"})
	if err != nil {
		t.Fatal(err)
	}
	s := spec(device(1, "node-e"), "talos-provision", fleet.ActionProvision, "provision-dddddddd")
	err = in.Install(context.Background(), s)
	if err == nil || errors.Is(err, fleet.ErrTemplate) {
		t.Fatalf("Install against a closed port: %v, want an error that is not fleet.ErrTemplate (retry later)", err)
	}
	if err := in.Ping(context.Background()); err == nil {
		t.Error("Ping against a closed port succeeded")
	}
}

// talosProvision makes a refusal's request a provision of the Talos class.
func talosProvision(s *fleet.WorkflowSpec) {
	s.Action, s.Request = fleet.ActionProvision, "provision-rrrrrrrr"
	s.Name = fleet.WorkflowName(s.Device.Name, s.Request)
}

func TestInstallRefusals(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(agentTemplate, old, new, 1) }
	tests := []struct {
		name     string
		template string // "" creates no Template
		modify   func(*fleet.WorkflowSpec)
		want     string
	}{
		{name: "refuse/template-missing", want: "does not exist in namespace"},
		{name: "refuse/template-does-not-parse", template: replace("{{.action}}", "{{.action"), want: "parse template"},
		{name: "refuse/template-unknown-key", template: replace("{{.disk_serial}}", "{{.disk_model}}"), want: "disk_model"},
		{name: "refuse/template-not-yaml", template: replace("tasks:", "tasks: ["), want: "decode rendered YAML"},
		{name: "refuse/global-timeout-zero", template: replace("global_timeout: 1800", "global_timeout: 0"), want: "global_timeout is 0"},
		{name: "refuse/global-timeout-missing", template: replace("global_timeout: 1800\n", ""), want: "global_timeout is 0"},
		{name: "refuse/action-timeout-zero", template: replace("timeout: 600", "timeout: 0"), want: "action wipe has timeout 0"},
		{name: "refuse/action-timeout-missing", template: replace("        timeout: 300\n", ""), want: "action fleetd-enroll has timeout 0"},
		{name: "refuse/first-action-not-agent", template: replace("FLEETD_ACTION: enroll", "FLEETD_ACTION: skip"), want: "is not the fleetd agent"},
		{name: "refuse/agent-for-another-device", template: replace(`FLEETD_DEVICE: "{{.device_name}}"`, `FLEETD_DEVICE: "node-z"`), want: `FLEETD_DEVICE="node-z"`},
		{name: "refuse/agent-without-the-request", template: replace(`      FLEETD_REQUEST: "{{.request}}"`+"\n", ""), want: `FLEETD_REQUEST=""`},
		{name: "refuse/agent-for-another-request", template: replace(`FLEETD_REQUEST: "{{.request}}"`, `FLEETD_REQUEST: "wipe-00000000"`), want: `FLEETD_REQUEST="wipe-00000000", want "wipe-rrrrrrrr"`},
		{name: "refuse/worker-not-the-mac", template: replace(`worker: "{{.device_1}}"`, `worker: "aa:bb:cc:dd:ee:ff"`), want: "want the device's MAC"},
		{name: "refuse/bad-image", template: replace("docker.io/library/alpine:3.20", "Not An Image"), want: "not a container reference"},
		{name: "refuse/two-tasks", template: agentTemplate + "  - name: second\n    worker: \"{{.device_1}}\"\n    actions: []\n", want: "2 tasks"},
		{name: "refuse/device-name-not-a-k8s-name", template: agentTemplate, modify: func(s *fleet.WorkflowSpec) {
			s.Device.Name = "Node_A"
			s.Name = fleet.WorkflowName(s.Device.Name, s.Request)
		}, want: `device name "Node_A" is not a valid Kubernetes object name`},
		{name: "refuse/no-mac", template: agentTemplate, modify: func(s *fleet.WorkflowSpec) { s.Device.MACs = nil }, want: "has no MAC"},
		{name: "refuse/talos-provision-without-meta-step", template: agentTemplate, modify: talosProvision,
			want: "no action after the agent has FLEETD_ACTION=talos-meta in the agent's image"},
		{name: "refuse/talos-meta-step-in-another-image", template: strings.Replace(talosTemplate, "fleetd-agent:v0.1.0\n        timeout: 120", "fleetd-agent:v0.0.9\n        timeout: 120", 1),
			modify: talosProvision, want: "add right after the image write the action {name: talos-meta, image: ghcr.io/folly-infra/fleetd-agent:v0.1.0"},
		{name: "refuse/iso-without-bmc", template: agentTemplate, modify: func(s *fleet.WorkflowSpec) {
			s.Class.Netboot = fleet.Netboot{BootMode: "iso", ISOURL: "https://boot/hook.iso"}
		}, want: "boots by ISO, which needs a BMC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			if tc.template != "" {
				e.template(t, "tpl", tc.template)
			}
			s := spec(device(3, "node-r"), "tpl", fleet.ActionWipe, "wipe-rrrrrrrr")
			if tc.modify != nil {
				tc.modify(&s)
			}
			// fleetd plan's check gives the very refusal, and writes nothing either.
			previewed := e.in.PreviewInstall(ctx, s)
			err := e.in.Install(ctx, s)
			if previewed == nil || err == nil || previewed.Error() != err.Error() {
				t.Errorf("PreviewInstall: %v; Install: %v", previewed, err)
			}
			var refused *workflows.RefusedError
			if !errors.Is(err, fleet.ErrTemplate) || !errors.As(err, &refused) {
				t.Fatalf("Install: %v, want a *RefusedError wrapping fleet.ErrTemplate", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal %q does not say %q", err, tc.want)
			}
			e.wroteNothing(t, "refused Install")
		})
	}
}

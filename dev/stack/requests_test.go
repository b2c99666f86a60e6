package stack_test

import (
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// TestOwnerRequests: the owner asks through NetBox's REST API (desired_action, or status
// decommissioning), NetBox's webhook reaches the real fleetd, and fleetd accepts the request:
// fleet_state pending, desired_action cleared, one journal entry saying so, and exactly one
// Workflow from the class's Template with its Hardware (docs/design.md §1 step 2, §2, §3).
func TestOwnerRequests(t *testing.T) {
	needStack(t)
	tests := []struct {
		name     string
		device   string
		setup    map[string]any // a PATCH the owner makes first (no request yet)
		request  map[string]any
		action   string
		template string
		status   string // the NetBox status after the claim
	}{
		{"ok/provision-talos-controlplane", "cp-1", nil, desired("provision"), "provision", "talos-provision", "staged"},
		{"ok/provision-talos-worker", "worker-1", nil, desired("provision"), "provision", "talos-provision", "staged"},
		{"ok/provision-nixos-image", "builder-1", nil, desired("provision"), "provision", "nixos-image-provision", "staged"},
		{"ok/provision-alpine-image", "edge-1", nil, desired("provision"), "provision", "alpine-image-provision", "staged"},
		{"ok/provision-cloud-init-nocloud", "lab-1", nil, desired("provision"), "provision", "cloud-init-nocloud-provision", "staged"},
		{"ok/attest-active-device", "extra-001", map[string]any{"status": "active"}, desired("attest"), "attest", "attest", "active"},
		{"ok/wipe", "extra-002", nil, desired("wipe"), "wipe", "wipe", "planned"},
		{"ok/retire", "extra-003", nil, map[string]any{"status": "decommissioning"}, "retire", "retire", "decommissioning"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.setup != nil {
				patch(t, tc.device, tc.setup)
			}
			patch(t, tc.device, tc.request)
			d := waitState(t, tc.device, "pending")

			if got := d.Field("desired_action"); got != "" {
				t.Errorf("desired_action = %q after the claim, want it cleared", got)
			}
			if d.StatusValue() != tc.status {
				t.Errorf("status = %s, want %s", d.StatusValue(), tc.status)
			}
			req, wfName := d.Field("fleet_request"), d.Field("fleet_workflow")
			if !strings.HasPrefix(req, tc.action+"-") || wfName != tc.device+"-"+req {
				t.Errorf("fleet_request %q, fleet_workflow %q: want a %s request and the Workflow named after it", req, wfName, tc.action)
			}
			wf := waitWorkflow(t, tc.device, wfName)
			checkWorkflow(t, tc.device, wf, tc.template, tc.action)

			j := waitJournal(t, tc.device, 1)
			if len(j) != 1 || j[0].KindValue() != "info" || !strings.Contains(j[0].Comments, tc.action+" accepted") ||
				!strings.Contains(j[0].Comments, wfName) || !strings.Contains(j[0].Comments, tc.template) {
				t.Errorf("journal = %+v, want one info entry saying %s accepted with Workflow %s from Template %s", j, tc.action, wfName, tc.template)
			}
			if n := len(deviceWorkflows(t, tc.device)); n != 1 {
				t.Errorf("%d Workflows for %s, want exactly 1", n, tc.device)
			}
		})
	}
}

func desired(action string) map[string]any {
	return map[string]any{"custom_fields": map[string]any{"desired_action": action}}
}

// waitWorkflow waits until the named Workflow exists in the Kubernetes API.
func waitWorkflow(t testing.TB, device, name string) *tinkerbell.Workflow {
	t.Helper()
	wf := &tinkerbell.Workflow{}
	eventually(t, "Workflow "+name, func() (bool, string) {
		err := testStack.Kube().Get(tctx(t), client.ObjectKey{Namespace: testStack.Info().Namespace, Name: name}, wf)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return wf
}

// checkWorkflow checks the Workflow against the device's declaration: the class's Template, the
// Hardware with the device's MAC and address, and hardwareMap (docs/design.md §3).
func checkWorkflow(t testing.TB, device string, wf *tinkerbell.Workflow, template, action string) {
	t.Helper()
	m := testStack.Info().Machines[device]
	if wf.Spec.TemplateRef != template || wf.Spec.HardwareRef != device {
		t.Errorf("Workflow %s: template %q hardware %q, want %q and %q", wf.Name, wf.Spec.TemplateRef, wf.Spec.HardwareRef, template, device)
	}
	hm := wf.Spec.HardwareMap
	if hm[workflows.MapMAC] != m.MAC || hm[workflows.MapDiskSerial] != m.DiskSerial || hm[workflows.MapDeviceName] != device ||
		hm[workflows.MapFleetdURL] != testStack.Info().Fleetd.URL || hm[workflows.MapAction] != action {
		t.Errorf("Workflow %s hardwareMap = %v, want MAC %s, disk %s, device %s, fleetd %s, action %s",
			wf.Name, hm, m.MAC, m.DiskSerial, device, testStack.Info().Fleetd.URL, action)
	}
	hw := &tinkv1.Hardware{}
	if err := testStack.Kube().Get(tctx(t), client.ObjectKey{Namespace: wf.Namespace, Name: device}, hw); err != nil {
		t.Fatalf("Hardware %s: %v", device, err)
	}
	addr := strings.SplitN(m.Address, "/", 2)[0]
	if len(hw.Spec.Interfaces) != 1 || hw.Spec.Interfaces[0].DHCP == nil || hw.Spec.Interfaces[0].DHCP.MAC != m.MAC ||
		hw.Spec.Interfaces[0].DHCP.IP == nil || hw.Spec.Interfaces[0].DHCP.IP.Address != addr {
		t.Errorf("Hardware %s interfaces = %+v, want one with MAC %s and address %s", device, hw.Spec.Interfaces, m.MAC, addr)
	}
}

package stack_test

import (
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRefusals: each faulty declaration of the example inventory is refused before anything
// runs (docs/design.md §1 step 2, §8): fleet_state rejected, a fleet_message naming exactly what is
// wrong, the same sentence in one warning journal entry, desired_action cleared, and no
// Workflow or Hardware.
func TestRefusals(t *testing.T) {
	needStack(t)
	tests := []struct {
		name     string
		device   string
		setup    map[string]any
		action   string
		problems []string // one substring per problem; the message names exactly these
	}{
		{"refuse/no-disk-serial", "fault-no-disk-serial", nil, "provision", []string{"disk_serial is empty"}},
		{"refuse/unknown-class", "fault-unknown-class", nil, "provision", []string{`fleet_class "gpu-worker" is not in classes.json`}},
		{"refuse/no-ek-hash", "fault-no-ek", nil, "provision", []string{"ek_sha256 is empty"}},
		{"refuse/tpm-1.2", "fault-tpm12", nil, "provision", []string{"tpm is 1.2"}},
		{"refuse/no-mac", "fault-no-mac", nil, "provision", []string{"has no MAC address"}},
		{"refuse/worker-g2", "g2-1", nil, "provision", []string{"class worker-g2 cannot be installed: G2 workers have a TPM 1.2", "tpm is 1.2"}},
		{"refuse/wipe-no-disk-serial", "fault-no-disk-serial", nil, "wipe", []string{"disk_serial is empty"}},
		{"refuse/attest-planned-device", "extra-004", nil, "attest", []string{"attest re-proves a running node, but the device status is planned"}},
		{"refuse/provision-decommissioning-device", "extra-014", map[string]any{"status": "decommissioning"}, "provision",
			[]string{"the device is decommissioning: set its status back to planned"}},
	}
	// Rows on the same device run in order; the others in parallel.
	byDevice := map[string][]int{}
	var order []string
	for i, tc := range tests {
		if _, ok := byDevice[tc.device]; !ok {
			order = append(order, tc.device)
		}
		byDevice[tc.device] = append(byDevice[tc.device], i)
	}
	for _, dev := range order {
		t.Run(dev, func(t *testing.T) {
			t.Parallel()
			for _, i := range byDevice[dev] {
				tc := tests[i]
				t.Run(tc.name, func(t *testing.T) { checkRefusal(t, tc.device, tc.setup, tc.action, tc.problems) })
			}
		})
	}
}

// problemMarkers are the words of every problem fleetd names in a refusal; a refusal must name
// exactly the expected ones.
var problemMarkers = []string{"cannot name a host", "fleet_class is empty", "is not in classes.json", "cannot be installed",
	"tpm is 1.2", "is not 2.0 or 1.2", "disk_serial is empty", "has no MAC address", "has no primary IPv4 address",
	"ek_sha256 is empty", "is not a hex SHA-256", "attest re-proves a running node", "the device is decommissioning"}

func checkRefusal(t *testing.T, dev string, setup map[string]any, action string, problems []string) {
	if setup != nil {
		patch(t, dev, setup)
		if setup["status"] == "decommissioning" {
			// Decommissioning asks for retirement: let it be accepted first, then fail it, so
			// that the device is idle again and the provision below is what is judged.
			d := waitState(t, dev, "pending")
			failWorkflow(t, dev, d.Field("fleet_workflow"), "wipe-disk", "simulated")
			waitState(t, dev, "failed")
			waitJournal(t, dev, 2)
		}
	}
	before := len(journal(t, dev))
	ask(t, dev, action)
	d := waitRejectedFor(t, dev, action)
	msg := d.Field("fleet_message")
	for _, p := range problems {
		if !strings.Contains(msg, p) {
			t.Errorf("fleet_message %q does not say %q", msg, p)
		}
	}
	for _, m := range problemMarkers {
		expected := false
		for _, p := range problems {
			expected = expected || strings.Contains(p, m)
		}
		if !expected && strings.Contains(msg, m) {
			t.Errorf("fleet_message %q also names %q, which is not wrong with %s", msg, m, dev)
		}
	}
	if got := d.Field("desired_action"); got != "" {
		t.Errorf("desired_action = %q after the refusal, want it cleared", got)
	}
	j := waitJournal(t, dev, before+1)
	if len(j) != before+1 || j[before].KindValue() != "warning" || j[before].Comments != msg {
		t.Errorf("journal = %+v, want one new warning entry saying %q", j[before:], msg)
	}
	if setup == nil {
		if wfs := deviceWorkflows(t, dev); len(wfs) != 0 {
			t.Errorf("%d Workflows for refused device %s, want none", len(wfs), dev)
		}
		err := testStack.Kube().Get(tctx(t), client.ObjectKey{Namespace: testStack.Info().Namespace, Name: dev}, &tinkv1.Hardware{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("Hardware %s of a refused device: %v, want NotFound", dev, err)
		}
	}
}

// waitRejectedFor waits until the device's last outcome is a refusal of action.
func waitRejectedFor(t *testing.T, dev, action string) (d deviceView) {
	t.Helper()
	eventually(t, dev+" "+action+" rejected", func() (bool, string) {
		var err error
		d, err = testStack.Owner().Device(tctx(t), dev)
		if err != nil {
			return false, err.Error()
		}
		msg := d.Field("fleet_message")
		return d.Field("fleet_state") == "rejected" && strings.HasPrefix(msg, action+" refused: "),
			"fleet_state=" + d.Field("fleet_state") + " message=" + msg
	})
	return d
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// TestPlanCommand runs `fleetd plan` against the real handlers and service: the text and the
// JSON, the exit statuses (0 carried out, 1 rejected, 2 no plan), and that nothing was written.
func TestPlanCommand(t *testing.T) {
	ok := fleettest.Declared(1, "node-a")
	noDisk := fleettest.Declared(2, "node-b")
	noDisk.Declared.DiskSerial = ""
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{ok, noDisk}})
	tok := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tok, []byte("op\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fleetdPlan := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Plan(context.Background(), append([]string{"--url", f.URL, "--token-file", tok}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	before := []fleet.Device{f.Inv.Get(1), f.Inv.Get(2)}

	code, out, _ := fleetdPlan("node-a", "--action", "wipe")
	for _, want := range []string{"plan node-a: wipe (asked with --action; fleet_state none): accepted",
		"fleet_request wipe-<8 chars>, fleet_workflow node-a-wipe-<8 chars>",
		"fleet_message and journal (info): wipe accepted as request wipe-<8 chars>: Workflow node-a-wipe-<8 chars> from Template fleet-wipe.",
		"disk: ERASES disk_serial S4EWNX0R123456; the agent must find it exactly once",
		"then: attested → wiping; receipt-verified → wiped (status offline), certificates cleared",
		"on a Workflow's success with no verified receipt: workflow-succeeded → unconfirmed (status failed), certificates cleared"} {
		if !strings.Contains(out, want) {
			t.Errorf("exit %d, text lacks %q:\n%s", code, want, out)
		}
	}
	if code != 0 {
		t.Errorf("an accepted wipe exits %d", code)
	}
	code, out, _ = fleetdPlan("-o", "json", "--action", "provision", "node-b")
	var p api.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 1 || p.Outcome != "rejected" || p.Write == nil ||
		p.Write.Message != "provision refused: disk_serial is empty: declare the serial of the one disk that may be wiped and installed." {
		t.Errorf("rejected provision: exit %d, %v, %+v", code, err, p.Write)
	}
	if code, _, errOut := fleetdPlan("nobody"); code != 2 || !strings.Contains(errOut, "404 unknown_device") {
		t.Errorf("unknown device: exit %d, %q", code, errOut)
	}
	if code, _, errOut := fleetdPlan("--action", "format", "node-a"); code != 2 || !strings.Contains(errOut, "400 unknown_action") {
		t.Errorf("unknown action: exit %d, %q", code, errOut)
	}
	after := []fleet.Device{f.Inv.Get(1), f.Inv.Get(2)}
	if !reflect.DeepEqual(before, after) || len(f.Inv.JournalOf(1))+len(f.Inv.JournalOf(2)) != 0 || f.Installer.Creates() != 0 {
		t.Errorf("the plans wrote: %+v, journal %q %q, %d Workflows", after, f.Inv.JournalOf(1), f.Inv.JournalOf(2), f.Installer.Creates())
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/folly-infra/fleetd/netbox/layout"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// TestInventoryCommand runs `fleetd inventory check` against the real handlers and service: a
// swapped disk is one line and exit 1, a device that agrees exit 0 with no line, -o json, an
// unknown device and a NetBox that cannot be read exit 2, and nothing is written.
func TestInventoryCommand(t *testing.T) {
	now := time.Now().UTC()
	facts := func(d fleet.Device, diskSerial string) fleet.Device {
		d.Owned.Facts = layout.Facts{Version: layout.FactsVersion,
			Proved:  layout.ProvedFacts{EKSHA256: fleettest.EKHash, Learned: layout.Learned{Since: now.Add(-time.Hour), Source: layout.FactsFromEnrollment}},
			Claimed: layout.ClaimedFacts{MAC: string(d.MACs[0]), Disks: []layout.FactDisk{{Serial: diskSerial, Path: "/dev/disk/by-id/ata-X_" + diskSerial}}, DisksFound: 1, Learned: layout.Learned{Since: now.Add(-time.Hour), Source: layout.FactsFromEnrollment}}}
		return d
	}
	ok := facts(fleettest.Declared(1, "node-a"), "S4EWNX0R123456")
	swapped := facts(fleettest.Declared(2, "node-b"), "SWAP0001")
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{ok, swapped}})
	tok := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tok, []byte("op\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Inventory(context.Background(), append([]string{"check", "--url", f.URL, "--token-file", tok}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	before := []fleet.Device{f.Inv.Get(1), f.Inv.Get(2)}

	code, out, _ := check()
	if code != 1 || !strings.Contains(out, `node-b: disk_not_found: disk_serial "S4EWNX0R123456" is not among the 1 disks the machine reported (serials "SWAP0001")`) ||
		strings.Contains(out, "node-a:") || !strings.Contains(out, "inventory: 2 devices checked") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	if code, out, _ := check("node-a"); code != 0 || strings.Contains(out, "node-a:") {
		t.Errorf("an agreeing device: exit %d:\n%s", code, out)
	}
	code, out, _ = check("-o", "json", "node-a", "node-b")
	var rep api.Inventory
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Differences != 1 || len(rep.Devices) != 2 ||
		rep.Devices[1].Result != "differs" || rep.Devices[1].Differences[0].Kind != "disk_not_found" {
		t.Errorf("json: exit %d, %v, %+v", code, err, rep)
	}
	if code, _, errOut := check("nobody"); code != 2 || !strings.Contains(errOut, "404 unknown_device") {
		t.Errorf("unknown device: exit %d, %q", code, errOut)
	}
	f.ChangeLog.Err = errors.New("connection refused")
	if code, _, errOut := check(); code != 2 || !strings.Contains(errOut, "could not check") || !strings.Contains(errOut, "503 netbox_unavailable") ||
		!strings.Contains(errOut, "NetBox's change log") {
		t.Errorf("NetBox's change log down: exit %d, %q; want 2 naming the change log", code, errOut)
	}

	after := []fleet.Device{f.Inv.Get(1), f.Inv.Get(2)}
	if !reflect.DeepEqual(before, after) || len(f.Inv.JournalOf(1))+len(f.Inv.JournalOf(2)) != 0 || f.Installer.Creates() != 0 {
		t.Errorf("the check wrote: %+v", after)
	}
}

package stack_test

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
)

// TestForgedEditorWrites is the attack of a NetBox user who may edit devices and holds no secret
// of fleetd's, through NetBox's REST API with an owner's token (docs/security.md, "What a NetBox
// device editor can do"). A machine is provisioned and wiped; it kept a copy of its disk (its
// LAK files). The editor saves the device twice, back to back, three times over: first the
// custom fields fleetd wrote while the machine was active (its lak_serial, fleet_identity and
// fleet_state, fleet_seal with them), then the ones it holds now. Then a delivery NetBox signed
// for the last second save — the editor's — is sent to fleetd again, as anyone who can read the
// webhook secret can (NetBox's signature carries no time). fleetd never writes the old identity:
// every save of its after the attack began leaves the device wiped with no serial and no identity,
// its last save puts its own values back, and the wiped machine's boot check with its old LAK is
// refused.
func TestForgedEditorWrites(t *testing.T) {
	needStack(t)
	const name = "forged-wipe"
	provisioned(t, name)
	if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err != nil {
		t.Fatalf("the active node's boot check: %v", err)
	}
	active := device(t, name) // what the editor copies: fleetd's own sealed values of the active node
	if active.Field("lak_serial") == "" || active.Field("fleet_state") != "active" {
		t.Fatalf("active device: %v", active.CustomFields)
	}
	nodeDir := filepath.Join(testStack.Info().Machines[name].Dir, "disk", "var", "lib", "fleetd-node")
	saved := copyDir(t, nodeDir, t.TempDir())
	ask(t, name, "wipe")
	accepted(t, name)
	if err := step(t, stack.Netboot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("netboot: %v", err)
	}
	wiped := waitState(t, name, "wiped")
	id := testStack.DeviceID(name)
	start := len(testStack.NetBox().Changes("dcim.device", id))

	var lastSecond int64 // the change-log id of the editor's last save
	for pair := range 3 {
		current := device(t, name).CustomFields
		saves := len(testStack.NetBox().Changes("dcim.device", id))
		patch(t, name, map[string]any{"custom_fields": active.CustomFields})
		patch(t, name, map[string]any{"custom_fields": current})
		chs := testStack.NetBox().Changes("dcim.device", id)
		if len(chs) == saves {
			continue // the device held the copy's values already: the saves changed nothing
		}
		lastSecond = chs[len(chs)-1].Seq
		eventually(t, fmt.Sprintf("fleetd answers the editor's pair of saves %d", pair+1), func() (bool, string) {
			chs := testStack.NetBox().Changes("dcim.device", id)
			last := chs[len(chs)-1]
			return last.User == stack.ServiceUser && last.Seq > lastSecond, fmt.Sprintf("last save %d by %s", last.Seq, last.User)
		})
	}
	if lastSecond != 0 {
		replayLastDelivery(t, id, lastSecond)
	}

	for _, ch := range testStack.NetBox().Changes("dcim.device", id)[start:] {
		cf, _ := ch.PostChange["custom_fields"].(map[string]any)
		if ch.User != stack.ServiceUser {
			continue
		}
		if cf["fleet_state"] != "wiped" || cf["lak_serial"] != nil || cf["ldevid_serial"] != nil || cf["fleet_identity"] != nil {
			t.Errorf("fleetd's save %d wrote fleet_state %v, lak_serial %v, ldevid_serial %v, fleet_identity set %v: the wiped identity revived",
				ch.Seq, cf["fleet_state"], cf["lak_serial"], cf["ldevid_serial"], cf["fleet_identity"] != nil)
		}
	}
	chs := testStack.NetBox().Changes("dcim.device", id)
	if last := chs[len(chs)-1]; last.User != stack.ServiceUser {
		t.Errorf("the device's last save is %s's: an editor's write of fleetd's fields stands", last.User)
	}
	now := device(t, name)
	for _, f := range []string{"fleet_state", "fleet_request", "lak_serial", "ldevid_serial", "fleet_identity"} {
		if !reflect.DeepEqual(now.CustomFields[f], wiped.CustomFields[f]) {
			t.Errorf("%s is %.80v, fleetd's wipe wrote %.80v", f, now.CustomFields[f], wiped.CustomFields[f])
		}
	}
	restored := 0
	for _, j := range journal(t, name) {
		if j.KindValue() == "warning" && strings.Contains(j.Comments, "were written by "+stack.OwnerUser) && strings.Contains(j.Comments, "restored to fleetd's write of") {
			restored++
		}
	}
	if restored == 0 {
		t.Errorf("no journal entry says fleetd put its values back from its own write (%d entries)", len(journal(t, name)))
	}
	// The machine kept a copy of its disk: its old LAK proves nothing any more.
	copyDir(t, saved, nodeDir)
	if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err == nil || !strings.Contains(err.Error(), "lak_not_current") {
		t.Errorf("refuse/the wiped machine's boot check with its old LAK: %v, want lak_not_current", err)
	}
}

// replayLastDelivery sends fleetd again, byte for byte with its signature, the delivery NetBox
// made for the save seq of device id, and waits for a periodic reconcile to have run since.
func replayLastDelivery(t *testing.T, id, seq int64) {
	t.Helper()
	emu := testStack.NetBox()
	var request string
	for _, ch := range emu.Changes("dcim.device", id) {
		if ch.Seq == seq {
			request = ch.RequestID
		}
	}
	var d *netboxemu.Delivery
	eventually(t, "NetBox's delivery of the editor's save", func() (bool, string) {
		for _, x := range emu.Deliveries() {
			if x.ObjectID == id && x.RequestID == request && x.StatusCode == http.StatusAccepted {
				d = &x
				return true, ""
			}
		}
		return false, "none yet"
	})
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	before := reconcileRuns(t)
	if status, body := postWebhook(t, u.Path, d.Body, d.Header.Get("X-Hook-Signature")); status != http.StatusAccepted {
		t.Fatalf("the replayed delivery: %d %s, want 202", status, body)
	}
	waitReconciles(t, before, 1) // the webhook's worker decides well within a reconcile interval
}

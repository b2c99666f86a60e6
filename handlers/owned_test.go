package handlers_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// wipedAfterEnrollment is node-a enrolled through the real agent, boot-checked once, then wiped
// by fleetd (its serials, identity and baseline cleared, state wiped, as the wipe's Workflow
// success writes them). It returns the node's copy of its LAK files and fleetd's sealed write
// of the active node, which an editor's copy would hold.
func wipedAfterEnrollment(t *testing.T) (*fleetdUnderTest, agent.BootCheckConfig, fleet.Device) {
	t.Helper()
	sim, ch := simulatorBoot(t)
	t.Cleanup(func() { sim.Close() })
	f, dir := enrollActive(t, catalog(fleet.SecureBootRequired), simulatorEK(t, ch), agent.EnrollConfig{Channel: ch})
	cfg := agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: f.url, RetryWait: time.Millisecond, Retries: 1}, Dir: dir, Channel: ch, Log: zerolog.Nop(),
		Hardware: agent.Hardware{SysRoot: t.TempDir(), DevRoot: t.TempDir()}}
	if err := agent.BootCheck(context.Background(), cfg); err != nil {
		t.Fatalf("the active node's boot check: %v", err)
	}
	active := f.inv.Get(12)
	wiped := active
	empty := fleet.IdentityMaterial{}
	wiped.Status = fleet.StatusOffline
	wiped.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-aaaaaaaa", Workflow: "node-a-wipe-aaaaaaaa",
		Message: "Workflow node-a-wipe-aaaaaaaa succeeded: disk wiped.", Identity: empty, Facts: active.Owned.Facts}
	f.inv.Set(wiped)
	return f, cfg, active
}

// signedWebhook posts a device update event for node-a signed with the webhook secret, as NetBox
// or anyone who can read the secret in NetBox would, with the snapshots given, and waits for
// fleetd's worker to have decided it.
func signedWebhook(t *testing.T, f *fleetdUnderTest, user string, pre, post fleet.Device) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"event": "updated", "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"object_type": "dcim.device", "username": user, "request_id": "7d0f8b4e-0000-4000-8000-000000000001",
		"data":      map[string]any{"id": 12, "name": "node-a"},
		"snapshots": map[string]any{"prechange": snapshot(pre), "postchange": snapshot(post)}})
	mac := hmac.New(sha512.New, []byte(handlerstest.WebhookSecret))
	mac.Write(body)
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/netbox/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hook-Signature", hex.EncodeToString(mac.Sum(nil)))
	before := decided(t, f)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signed webhook: %v %v, want 202", resp, err)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); decided(t, f) == before; {
		if time.Now().After(deadline) {
			t.Fatal("the webhook was not decided within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decided is how many webhooks fleetd's workers decided, on every route.
func decided(t *testing.T, f *fleetdUnderTest) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "fleetd_webhook_work_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "decided" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// snapshot is a device's snapshot as NetBox's webhook carries it: its custom field data.
func snapshot(d fleet.Device) map[string]any {
	o := d.Owned
	cf := map[string]any{"fleet_class": d.Declared.Class, "disk_serial": d.Declared.DiskSerial, "fleet_state": string(o.State),
		"fleet_request": o.Request, "fleet_workflow": o.Workflow, "ldevid_serial": o.LDevIDSerial, "lak_serial": o.LAKSerial,
		"fleet_message": o.Message, "fleet_seal": d.Seal}
	if !o.Identity.Empty() {
		cf["fleet_identity"] = o.Identity
	}
	return map[string]any{"status": string(d.Status), "custom_fields": cf}
}

// TestEditorWritesAuthorizeNothing: what a NetBox user who may edit devices (and read the webhook
// secret) can send fleetd makes it vouch for nothing it did not write. A wiped node keeps a copy of
// its LAK files; its old identity comes back to fleetd in three ways, and each time the node's
// boot check with its old LAK is refused, nothing is renewed or issued, and the device stays as
// fleetd's wipe left it.
func TestEditorWritesAuthorizeNothing(t *testing.T) {
	t.Run("refuse/a signed webhook whose prechange holds the old identity restores nothing", func(t *testing.T) {
		f, cfg, active := wipedAfterEnrollment(t)
		wiped := f.inv.Get(12)
		saves := len(f.inv.Changes(12))
		signedWebhook(t, f, "admin", active, wiped) // a replayed or forged delivery: "admin changed it from active to wiped"
		if got := f.inv.Changes(12); len(got) != saves {
			t.Errorf("fleetd wrote %d saves for the webhook, want none: its snapshots are no source of values", len(got)-saves)
		}
		expectRefusedOldLAK(t, f, cfg, wiped)
	})
	t.Run("refuse/the old identity saved back, then the current values: fleetd puts its own back", func(t *testing.T) {
		f, cfg, active := wipedAfterEnrollment(t)
		wiped := f.inv.Get(12)
		start := len(f.inv.Changes(12))
		f.inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned, d.Seal, d.Status = active.Owned, active.Seal, fleet.StatusActive })
		f.inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned, d.Seal, d.Status = wiped.Owned, wiped.Seal, wiped.Status })
		signedWebhook(t, f, "admin", func() fleet.Device { d := wiped; d.Owned, d.Seal = active.Owned, active.Seal; return d }(), wiped)
		for _, ch := range f.inv.Changes(12)[start:] {
			if ch.User == fleettest.ServiceUser && (ch.After.Owned.LAKSerial != "" || ch.After.Owned.State != fleet.StateWiped || !ch.After.Owned.Identity.Empty()) {
				t.Errorf("fleetd's save at %s wrote %+v: the old identity revived", ch.Time, ch.After.Owned)
			}
		}
		if last := f.inv.Changes(12); last[len(last)-1].User != fleettest.ServiceUser {
			t.Errorf("the last save is %s's: the editor's copy stands", last[len(last)-1].User)
		}
		if j := f.inv.JournalOf(12); !strings.Contains(j[len(j)-1], "were written by admin") {
			t.Errorf("journal %q: want the restore named", j[len(j)-1])
		}
		expectRefusedOldLAK(t, f, cfg, wiped)
	})
	t.Run("refuse/the old LAK written as lak_serial_previous under a broken seal: never renewed against", func(t *testing.T) {
		f, cfg, active := wipedAfterEnrollment(t)
		wiped := f.inv.Get(12)
		f.inv.WriteAs("admin", 12, func(d *fleet.Device) {
			d.Owned.State, d.Status, d.Owned.LAKSerial, d.Owned.LAKSerialPrevious = fleet.StateActive, fleet.StatusActive, "0bad", active.Owned.LAKSerial
		})
		expectRefusedOldLAK(t, f, cfg, wiped)
	})
}

// expectRefusedOldLAK runs the wiped node's boot check with its old LAK files: refused, nothing
// renewed, and the device as fleetd's wipe left it.
func expectRefusedOldLAK(t *testing.T, f *fleetdUnderTest, cfg agent.BootCheckConfig, wiped fleet.Device) {
	t.Helper()
	err := agent.BootCheck(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "lak_not_current") {
		t.Errorf("the wiped node's boot check with its old LAK: %v, want lak_not_current", err)
	}
	if n := counter(t, f, "fleetd_cert_renewals_total", "renewed"); n != 0 {
		t.Errorf("%v certificates renewed for the wiped node", n)
	}
	got := f.inv.Get(12)
	if got.Owned.State != fleet.StateWiped || got.Owned.LAKSerial != "" || got.Owned.LAKSerialPrevious != "" || !got.Owned.Identity.Empty() ||
		got.Owned.Request != wiped.Owned.Request {
		t.Errorf("after the attack: %+v, want fleetd's wipe", got.Owned)
	}
}

// TestOperatorSeesUntrustedFields: the operator's view of a device whose fields another user
// wrote shows none of them as the device's (state none, no request or certificates) and says why,
// by whom, what NetBox holds and what fleetd would put back; the plan is of the device after that
// repair and names it. Neither writes anything.
func TestOperatorSeesUntrustedFields(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-aaaaaaaa", Workflow: "node-a-wipe-aaaaaaaa"}
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{d}})
	f.Inv.Set(d) // fleetd's write, in the change log
	f.Inv.WriteAs("admin", 12, func(d *fleet.Device) {
		d.Owned.State, d.Owned.LAKSerial, d.Declared.DesiredAction = fleet.StateActive, "0bad", fleet.ActionAttest
	})
	saves := len(f.Inv.Changes(12))
	get := func(path string, out any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, f.URL+path, nil)
		req.Header.Set("Authorization", "Bearer op")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	var view struct {
		State string `json:"state"`
		Certs struct {
			LAK string `json:"lak_serial"`
		} `json:"certificates"`
		Trust *struct{ Verdict, Reason string } `json:"trust"`
	}
	get("/v1/devices/node-a", &view)
	if tr := view.Trust; view.State != "none" || view.Certs.LAK != "" || tr == nil || tr.Verdict != "untrusted" ||
		!strings.Contains(tr.Reason, "written by admin") {
		t.Errorf("view: state %q lak %q trust %+v; want none, no serial, untrusted by admin", view.State, view.Certs.LAK, view.Trust)
	}
	var raw map[string]any
	get("/v1/devices/node-a", &raw)
	tr, _ := raw["trust"].(map[string]any)
	read, _ := tr["read"].(map[string]any)
	if tr["written_by"] != "admin" || read["state"] != "active" || read["lak_serial"] != "0bad" || tr["restores_to"] == nil {
		t.Errorf("trust %v: want written_by admin and what NetBox holds under read", tr)
	}
	var plan struct{ State, Action, Outcome, Repair string }
	get("/v1/devices/node-a/plan", &plan)
	if plan.State != "wiped" || plan.Action != "attest" || !strings.Contains(plan.Repair, "it first puts back its own write of") {
		t.Errorf("plan %+v: want the attest planned on fleetd's wiped device, the restore named first", plan)
	}
	if len(f.Inv.Changes(12)) != saves {
		t.Errorf("the view and the plan wrote %d saves", len(f.Inv.Changes(12))-saves)
	}
}

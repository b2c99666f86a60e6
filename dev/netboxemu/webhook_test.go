package netboxemu

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// ofRule returns the delivery records of one event rule, in order: every device update also
// fires fleetd-device-changed (netbox-webhooks.yaml), so a test of another rule counts its own.
func ofRule(ds []Delivery, rule string) []Delivery {
	var out []Delivery
	for _, d := range ds {
		if d.EventRule == rule {
			out = append(out, d)
		}
	}
	return out
}

// deliveredTo returns the deliveries to one webhook path, in arrival order.
func (f *fixture) deliveredTo(path string) []received {
	var out []received
	for _, r := range f.rcv.received() {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

func TestWebhookFiresOnNoOpPatch(t *testing.T) {
	f := newFixture(t)
	// The owner asks for a provision; then fleetd's own no-op PATCH still fires (NetBox enqueues
	// an event on every save, NB@v4.6.8:netbox/core/signals.py handle_changed_object).
	f.patchDevice(t, "Token "+f.admin, `{"custom_fields": {"desired_action": "provision"}}`)
	f.patchDevice(t, bearer(f.fleetd), `{}`)
	f.idle(t)
	got := f.deliveredTo("/v1/netbox/webhook/provision")
	if len(got) != 2 {
		t.Fatalf("provision webhooks = %d, want 2 (the owner's PATCH and the no-op)", len(got))
	}
	users := []string{}
	for _, r := range got {
		var body struct {
			Username string
			Request  struct{ User string }
		}
		_ = json.Unmarshal(r.body, &body)
		if body.Username != body.Request.User {
			t.Errorf("username %q != request.user %q", body.Username, body.Request.User)
		}
		users = append(users, body.Request.User)
	}
	sort.Strings(users)
	if strings.Join(users, ",") != "admin,fleetd" {
		t.Errorf("request.user = %v, want the token's user of each PATCH", users)
	}
	// No other rule matched but fleetd-device-changed, which sees every update of a fleet device
	// (fleetd's own come back too: fleetd counts them as echoes): attest, wipe, retire stay
	// silent, and the inventory rules do not cover device updates.
	if n := len(f.deliveredTo("/v1/netbox/webhook")); n != 2 {
		t.Errorf("%d deliveries of fleetd-device-changed, want 2 (one per PATCH)", n)
	}
	if n := len(f.rcv.received()); n != 4 {
		t.Errorf("%d deliveries in all, want 4", n)
	}
	// Once desired_action is cleared the condition is false again.
	f.patchDevice(t, bearer(f.fleetd), `{"custom_fields": {"desired_action": null}}`)
	f.idle(t)
	if n := len(f.deliveredTo("/v1/netbox/webhook/provision")); n != 2 {
		t.Errorf("after clearing desired_action: %d provision webhooks, want still 2", n)
	}
}

// bodyShape is the 4.6 default webhook body, byte for byte up to the variable parts.
var bodyShape = regexp.MustCompile(`^\{"event": "updated", "timestamp": "2026-05-01T17:42:\d\d\.\d{6}\+00:00", ` +
	`"object_type": "dcim\.device", "username": "admin", "request_id": "([0-9a-f-]{36})", "data": \{"id": 1, ` +
	`"url": "/api/dcim/devices/1/", "display_url": "/dcim/devices/1/", "display": "node1", "name": "node1", .*\}, ` +
	`"request": \{"id": "([0-9a-f-]{36})", "method": "PATCH", "path": "/api/dcim/devices/1/", "user": "admin"\}, ` +
	`"snapshots": \{"prechange": \{"created": .*\}, "postchange": \{"created": .*\}\}\}$`)

func TestWebhookBodyAndSignature(t *testing.T) {
	f := newFixture(t)
	f.patchDevice(t, "Token "+f.admin, `{"status": "decommissioning", "description": "caf\u00e9 \ud83d\ude80"}`)
	f.idle(t)
	got := f.deliveredTo("/v1/netbox/webhook/retire")
	if len(got) != 1 {
		t.Fatalf("retire webhooks = %d", len(got))
	}
	r := got[0]
	// The signature is hex HMAC-SHA512 of the exact bytes received, computed here independently.
	mac := hmac.New(sha512.New, []byte(testSecret))
	mac.Write(r.body)
	if want := hex.EncodeToString(mac.Sum(nil)); r.header.Get("X-Hook-Signature") != want {
		t.Errorf("X-Hook-Signature = %q, want %q", r.header.Get("X-Hook-Signature"), want)
	}
	if r.header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type = %q", r.header.Get("Content-Type"))
	}
	m := bodyShape.FindSubmatch(r.body)
	if m == nil {
		t.Fatalf("body is not the 4.6 default body written like json.dumps:\n%s", r.body)
	}
	if string(m[1]) != string(m[2]) {
		t.Errorf("request_id %s != request.id %s", m[1], m[2])
	}
	// json.dumps escapes non-ASCII (ensure_ascii), with surrogate pairs.
	if !strings.Contains(string(r.body), `"description": "caf\u00e9 \ud83d\ude80"`) {
		t.Errorf("non-ASCII not escaped like Python: %s", r.body)
	}
	var body struct {
		Data struct {
			Status       struct{ Value, Label string }
			CustomFields map[string]any           `json:"custom_fields"`
			PrimaryIP4   struct{ Address string } `json:"primary_ip4"`
		}
		Snapshots struct{ Prechange, Postchange map[string]any }
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Data.Status.Value != "decommissioning" || body.Data.Status.Label != "Decommissioning" ||
		body.Data.PrimaryIP4.Address != "10.0.0.21/24" || len(body.Data.CustomFields) != f.cfs {
		t.Errorf("data = %+v", body.Data)
	}
	pre, post := body.Snapshots.Prechange, body.Snapshots.Postchange
	// Snapshots: FK ids, raw choice values, raw custom_field_data, no pk, no last_updated.
	for _, c := range []struct {
		key       string
		pre, post any
	}{{"status", "planned", "decommissioning"}, {"site", 1.0, 1.0}, {"primary_ip4", 1.0, 1.0},
		{"custom_fields", map[string]any{"tpm": "2.0", "disk_serial": "DISK1", "fleet_class": "talos-cp"}, nil}} {
		if fmt.Sprint(pre[c.key]) != fmt.Sprint(c.pre) || (c.post != nil && fmt.Sprint(post[c.key]) != fmt.Sprint(c.post)) {
			t.Errorf("snapshots[%s]: pre %v post %v, want %v %v", c.key, pre[c.key], post[c.key], c.pre, c.post)
		}
	}
	for _, k := range []string{"id", "last_updated"} {
		if _, ok := post[k]; ok {
			t.Errorf("postchange has %q", k)
		}
	}
	if !strings.Contains(string(r.body), `"custom_fields": {"tpm": "2.0", "disk_serial": "DISK1", "fleet_class": "talos-cp"}`) {
		t.Errorf("snapshot custom_fields not in jsonb key order: %s", r.body)
	}
}

func TestWebhookOnCreateAndInventory(t *testing.T) {
	f := newFixture(t)
	auth := "Token " + f.admin
	status, _, b := f.do(t, "POST", "/api/dcim/devices/", auth, `{"name": "node2", "device_type": 1, "role": 1, "site": 1, "custom_fields": {"desired_action": "provision"}}`)
	if status != 201 {
		t.Fatalf("create = %d %s", status, b)
	}
	f.do(t, "POST", "/api/dcim/mac-addresses/", auth, `{"mac_address": "aa:bb:cc:dd:ee:ff", "assigned_object_type": "dcim.interface", "assigned_object_id": 1}`)
	f.idle(t)
	prov := f.deliveredTo("/v1/netbox/webhook/provision")
	inv := f.deliveredTo("/v1/netbox/webhook")
	if len(prov) != 1 || len(inv) != 2 {
		t.Fatalf("provision %d, inventory %d deliveries; want 1 and 2 (device created, MAC created)", len(prov), len(inv))
	}
	var body struct {
		Event      string
		ObjectType string `json:"object_type"`
		Snapshots  struct {
			Prechange  any
			Postchange map[string]any
		}
	}
	_ = json.Unmarshal(prov[0].body, &body)
	if body.Event != "created" || body.Snapshots.Prechange != nil || body.Snapshots.Postchange["name"] != "node2" {
		t.Errorf("create body: %+v", body)
	}
	types := map[string]bool{}
	for _, r := range inv {
		_ = json.Unmarshal(r.body, &body)
		types[body.ObjectType+"/"+body.Event] = true
	}
	if !types["dcim.device/created"] || !types["dcim.macaddress/created"] {
		t.Errorf("inventory deliveries: %v", types)
	}
	for _, d := range f.emu.Deliveries() {
		if !d.OK() || d.StatusCode != 202 || d.User != "admin" {
			t.Errorf("delivery record %+v", d)
		}
	}
}

func TestWebhookFailureIsNotRetried(t *testing.T) {
	f := newFixture(t)
	f.rcv.mu.Lock()
	f.rcv.status = 500
	f.rcv.mu.Unlock()
	f.patchDevice(t, "Token "+f.admin, `{"custom_fields": {"desired_action": "wipe"}}`)
	f.idle(t)
	d := ofRule(f.emu.Deliveries(), "fleetd-wipe")
	if len(d) != 1 || d[0].OK() || d[0].StatusCode != 500 || d[0].Err == "" || len(f.deliveredTo("/v1/netbox/webhook/wipe")) != 1 {
		t.Errorf("wipe deliveries %+v, received %d: want one failed attempt, no retry", len(d), len(f.deliveredTo("/v1/netbox/webhook/wipe")))
	}
}

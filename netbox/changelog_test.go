package netbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/netbox"
)

// ownerSave is an owner's client saving a copy of the device it read earlier as pynetbox's
// Record.save() does: the whole custom_fields object, every key with the value it read.
func (e *env) ownerSave(t *testing.T, copyCF map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"custom_fields": copyCF})
	req, _ := http.NewRequest("PATCH", fmt.Sprintf("%s/api/dcim/devices/%d/", e.emu.URL(), e.node1), strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Token "+e.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("owner's save: %v %v", resp, err)
	}
	resp.Body.Close()
}

// fleetdWrite is a write of fleetd's as the service makes it: p sealed over the values the device
// holds after it, with the tests' seal key.
func (e *env) fleetdWrite(t *testing.T, p fleet.Patch) {
	t.Helper()
	ctx := context.Background()
	d, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	p.ApplyOwned(&d.Owned)
	p.Seal = fleettest.SealKeys().Seal(e.node1, d.Owned, time.Now())
	if _, err := e.client.Update(ctx, e.node1, p); err != nil {
		t.Fatal(err)
	}
}

// TestChangeLogBackstop: a stale full write (its old seal with it) whose webhook NetBox dropped is
// repaired by the next periodic reconcile from NetBox's change log (/api/core/object-changes/ as
// the emulator serves it with NetBox's filters): fleetd's fields are put back from its own write
// in the log, the written-back desired_action is not taken as a new request, and the journal names
// the writer.
func TestChangeLogBackstop(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	// The owner's copy, as the REST representation has it (every custom field, null when unset):
	// desired_action provision, no request yet.
	copyCF, _ := e.emu.CustomFieldData(e.node1)
	for _, f := range netbox.OwnedFields() {
		if _, ok := copyCF[f]; !ok {
			copyCF[f] = nil
		}
	}
	// fleetd claims the provision and records it (as its claim and attestation would).
	state, req, lak := fleet.StateActive, "provision-aaaaaaaa", "0c2d"
	e.fleetdWrite(t, fleet.Patch{ClearDesiredAction: true, State: &state, Request: &req, LAKSerial: &lak})
	since := time.Now().Add(-time.Minute)
	e.ownerSave(t, copyCF)

	changes, err := e.client.DeviceChanges(ctx, fleet.ChangeQuery{Since: since, ExceptUser: "fleetd"})
	if err != nil || len(changes) != 1 {
		t.Fatalf("others' changes = %+v, %v; want the owner's save", changes, err)
	}
	ch := changes[0]
	if ch.User != "admin" || ch.DeviceID != e.node1 || ch.Before.Owned.Request != req || ch.After.Owned.Request != "" ||
		ch.After.Declared.DesiredAction != fleet.ActionProvision || ch.Before.Owned.LAKSerial != lak {
		t.Errorf("the owner's change = %+v", ch)
	}
	all, err := e.client.DeviceChanges(ctx, fleet.ChangeQuery{Since: since, DeviceID: e.node1})
	if err != nil || len(all) != 2 || all[0].User != "fleetd" || all[1].User != "admin" {
		t.Fatalf("the device's changes = %+v, %v; want fleetd's then the owner's, oldest first", all, err)
	}

	inst := fleettest.NewInstaller()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: e.client, ChangeLog: e.client, Installer: inst, Catalog: fleettest.Catalog(),
			Clock: fleet.SystemClock{}, Random: rand.New(rand.NewSource(1)), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatalf("ReconcileAll: %v", err)
	}
	cf, _ := e.emu.CustomFieldData(e.node1)
	if cf["fleet_request"] != req || cf["fleet_state"] != "active" || cf["lak_serial"] != lak || cf["desired_action"] != nil {
		t.Errorf("after the reconcile: %v; want fleetd's request, state and LAK serial back and desired_action cleared", cf)
	}
	if inst.Creates() != 0 {
		t.Errorf("%d Workflows created: the written-back provision was taken as a new request", inst.Creates())
	}
	journal := e.emu.Journal(e.node1)
	if len(journal) != 1 || journal[0].CreatedBy != "fleetd" || journal[0].Kind != "warning" ||
		!strings.Contains(journal[0].Comments, "(fleet_state, fleet_request, lak_serial, fleet_seal) were written by admin at ") ||
		!strings.Contains(journal[0].Comments, "desired_action=provision from a copy read before request provision-aaaaaaaa") {
		t.Errorf("journal %+v", journal)
	}
	// The next run reads the change log again (with its overlap) and finds fleetd's restore last.
	if _, err := s.Requests.ReconcileAll(ctx); err != nil || len(e.emu.Journal(e.node1)) != 1 {
		t.Errorf("second reconcile: %v, journal %+v; want nothing more", err, e.emu.Journal(e.node1))
	}
}

// TestStaleCopyJudgedAfterItsUndo: a copy written back with desired_action set reaches NetBox
// while fleetd decides on a webhook of an earlier save (whose snapshots show nothing of the copy):
// before it claims or rejects, fleetd reads the device's change log and puts its own fields back,
// so the running request is kept and the written-back desired_action is not taken as a new
// request (the chaos run found fleetd rejecting its own pending request this way). The decision's
// read carries the change log: the values are fleetd's only after its own are put back.
func TestStaleCopyJudgedAfterItsUndo(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	active, provision := fleet.StateActive, "provision-aaaaaaaa"
	e.fleetdWrite(t, fleet.Patch{ClearDesiredAction: true, State: &active, Request: &provision})
	copyCF, _ := e.emu.CustomFieldData(e.node1) // the owner's copy: active, the provision, no desired_action
	for _, f := range netbox.OwnedFields() {
		if _, ok := copyCF[f]; !ok {
			copyCF[f] = nil
		}
	}
	pending, attest := fleet.StatePending, "attest-bbbbbbbb"
	e.fleetdWrite(t, fleet.Patch{State: &pending, Request: &attest})
	copyCF["desired_action"] = "attest"
	e.ownerSave(t, copyCF)

	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: e.client, ChangeLog: e.client, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(),
			Clock: fleet.SystemClock{}, Random: rand.New(rand.NewSource(1)), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requests.Reconcile(ctx, e.node1); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	cf, _ := e.emu.CustomFieldData(e.node1)
	if cf["fleet_request"] != attest || cf["fleet_state"] == string(fleet.StateRejected) || cf["fleet_state"] == string(fleet.StateActive) ||
		cf["desired_action"] != nil {
		t.Errorf("after the reconcile: %v; want request %s kept running and desired_action cleared", cf, attest)
	}
	journal := e.emu.Journal(e.node1)
	if len(journal) == 0 || !strings.Contains(journal[0].Comments, "(fleet_state, fleet_request, fleet_seal) were written by admin at ") {
		t.Errorf("journal %+v; want the restore named first", journal)
	}
}

// TestOlderRequestWrittenBackNotFollowed: a copy read while an older request was running (wiping,
// wipe-aaaaaaaa) is written back over a retired device, and fleetd reconciles the device before
// that save's webhook arrives (another instance's Workflow event or reconcile). Followed as
// fleetd's, the older request's failed Workflow would move the retired device to failed with
// status failed (the two-instance chaos run, seed 906); fleetd puts its own fields back first and
// records nothing for the older request.
func TestOlderRequestWrittenBackNotFollowed(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	wiping, wipe, wipeWF := fleet.StateWiping, "wipe-aaaaaaaa", "node1-wipe-aaaaaaaa"
	e.fleetdWrite(t, fleet.Patch{State: &wiping, Request: &wipe, Workflow: &wipeWF})
	copyCF, _ := e.emu.CustomFieldData(e.node1) // the owner's copy: the wipe running
	for _, f := range netbox.OwnedFields() {
		if _, ok := copyCF[f]; !ok {
			copyCF[f] = nil
		}
	}
	retired, retire, retireWF := fleet.StateRetired, "retire-bbbbbbbb", "node1-retire-bbbbbbbb"
	e.fleetdWrite(t, fleet.Patch{State: &retired, Request: &retire, Workflow: &retireWF})
	before, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	e.ownerSave(t, copyCF)

	installer := fleettest.NewInstaller()
	installer.Set(wipeWF, fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "wipe-disk"})
	installer.Set(retireWF, fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded})
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: e.client, ChangeLog: e.client, Installer: installer, Catalog: fleettest.Catalog(),
			Clock: fleet.SystemClock{}, Random: rand.New(rand.NewSource(1)), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requests.WorkflowChanged(ctx, e.node1, fleet.WorkflowStatus{Name: wipeWF, Phase: fleet.WorkflowFailed}); err != nil {
		t.Fatalf("WorkflowChanged: %v", err)
	}
	if _, err := s.Requests.Reconcile(ctx, e.node1); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owned.State != fleet.StateRetired || got.Owned.Request != retire || got.Owned.Workflow != retireWF || got.Status != before.Status {
		t.Errorf("after the Workflow event and the reconcile: state %s, request %s, Workflow %s, status %s; want %s, %s, %s, %s kept",
			got.Owned.State, got.Owned.Request, got.Owned.Workflow, got.Status, fleet.StateRetired, retire, retireWF, before.Status)
	}
	for _, j := range e.emu.Journal(e.node1) {
		if strings.Contains(j.Comments, "failed") {
			t.Errorf("journal records a failure for the older request: %q", j.Comments)
		}
	}
	if installer.Creates() != 0 {
		t.Errorf("%d Workflows created; want none", installer.Creates())
	}
}

// TestMACChanges: an owner's change of a MAC address object is read back from NetBox's change log
// with its value before and after, lowercase, and fleetd's own user can be left out.
func TestMACChanges(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	owner := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, e.emu.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Token "+e.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %v %v", method, path, resp, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	since := time.Now().Add(-time.Minute)
	list := owner("GET", fmt.Sprintf("/api/dcim/mac-addresses/?device_id=%d", e.node1), "")
	results, _ := list["results"].([]any)
	if len(results) == 0 {
		t.Fatal("node1 has no MAC address")
	}
	m := results[0].(map[string]any)
	before := strings.ToLower(m["mac_address"].(string))
	owner("PATCH", fmt.Sprintf("/api/dcim/mac-addresses/%v/", m["id"]), `{"mac_address": "02:F6:00:00:00:2A"}`)

	got, err := e.client.MACChanges(ctx, fleet.ChangeQuery{Since: since, ExceptUser: "fleetd"})
	if err != nil || len(got) != 1 || got[0].User != "admin" || got[0].Before != before || got[0].After != "02:f6:00:00:00:2a" {
		t.Fatalf("MAC changes = %+v, %v; want admin's %s → 02:f6:00:00:00:2a", got, err, before)
	}
	if got, err := e.client.MACChanges(ctx, fleet.ChangeQuery{Since: since, ExceptUser: "admin"}); err != nil || len(got) != 0 {
		t.Errorf("MAC changes by others than admin = %+v, %v", got, err)
	}
}

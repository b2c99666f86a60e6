package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/api"
	. "github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestUndoForeignWrite: a client that read the device earlier writes its whole custom_fields back
// (pynetbox's save()). fleetd puts its own fields back, journals who wrote them, and a
// desired_action from a copy older than the current request is not taken as a new request.
func TestUndoForeignWrite(t *testing.T) {
	base := fleettest.Declared(12, "node-a")
	base.Status = StatusStaged
	configuring := base
	configuring.Owned = Owned{State: StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", LAKSerial: "0c2d"}
	configuring = attested(configuring)
	active := configuring
	active.Owned.State, active.Owned.Message = StateActive, "Delivered."
	idle := base
	idle.Owned = Owned{State: StateActive, Request: "provision-zzzzzzzz", Workflow: "node-a-provision-zzzzzzzz"}
	idle.Declared.DesiredAction = ActionProvision // the copy was read while the owner's provision waited
	rows := []struct {
		name          string
		now           Device // fleetd's last write
		before, after Device // the foreign write's snapshots
		mod           func(*Device)
		want          State
		wantRequest   string
		wantAction    Action
		wantJournal   string
	}{
		{name: "ok/stale configuring after delivery: active put back", now: active, before: active,
			after: func() Device { d := configuring; d.Declared.DesiredAction = ActionAttest; return d }(),
			want:  StateActive, wantRequest: "provision-aaaaaaaa", wantAction: ActionAttest,
			wantJournal: "warning: Fields owned by fleetd were written by admin (fleet_state, fleet_message): restored."},
		{name: "ok/copy from before the claim: request put back, its desired_action not a new request", now: configuring, before: configuring,
			after: idle, want: StateConfiguring, wantRequest: "provision-aaaaaaaa", wantAction: ActionNone,
			wantJournal: "set desired_action=provision from a copy read before request provision-aaaaaaaa was claimed"},
		{name: "ok/a field fleetd wrote again since is left alone", now: active, before: configuring, after: idle,
			mod:  func(d *Device) { d.Owned.Request = "provision-bbbbbbbb" }, // fleetd claimed another request since
			want: StateConfiguring, wantRequest: "provision-bbbbbbbb", wantAction: ActionNone,
			wantJournal: "(fleet_state, fleet_workflow, lak_serial, fleet_identity): restored"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cur := r.after // what NetBox holds after the foreign write
			if r.mod != nil {
				r.mod(&cur)
			}
			inv := fleettest.NewInventory(cur)
			s := newTestService(inv, fleettest.NewInstaller())
			out, err := s.UndoForeignWrite(context.Background(), ForeignWrite{DeviceID: 12, User: "admin", Before: r.before, After: r.after})
			if err != nil || out.Result != "restored" {
				t.Fatalf("UndoForeignWrite = %+v, %v", out, err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.want || got.Owned.Request != r.wantRequest || got.Declared.DesiredAction != r.wantAction {
				t.Errorf("after the undo: state %q request %q desired_action %q, want %q %q %q",
					got.Owned.State, got.Owned.Request, got.Declared.DesiredAction, r.want, r.wantRequest, r.wantAction)
			}
			if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], r.wantJournal) {
				t.Errorf("journal %q, want one entry with %q", j, r.wantJournal)
			}
		})
	}
	// fleet_facts is fleetd's too: an owner's client writing back the facts it read before the
	// last boot check found a swapped disk must not put the old disk back.
	t.Run("ok/older fleet_facts written back: the newer facts put back", func(t *testing.T) {
		older, newer := active, active
		since := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		older.Owned.Facts = api.Facts{Version: api.FactsVersion, Claimed: api.ClaimedFacts{Disks: []api.FactDisk{{Serial: "SER-A"}}, DisksFound: 1,
			Learned: api.Learned{Since: since, Source: api.FactsFromEnrollment}}}
		newer.Owned.Facts = older.Owned.Facts
		newer.Owned.Facts.Claimed = api.ClaimedFacts{Disks: []api.FactDisk{{Serial: "SER-B"}}, DisksFound: 1,
			Learned: api.Learned{Since: since.Add(time.Hour), Source: api.FactsFromBootCheck}}
		inv := fleettest.NewInventory(older)
		s := newTestService(inv, fleettest.NewInstaller())
		out, err := s.UndoForeignWrite(context.Background(), ForeignWrite{DeviceID: 12, User: "admin", Before: newer, After: older})
		if err != nil || out.Result != "restored" {
			t.Fatalf("UndoForeignWrite = %+v, %v", out, err)
		}
		if got := inv.Get(12).Owned.Facts; !got.Equal(newer.Owned.Facts) {
			t.Errorf("fleet_facts after the undo = %+v, want fleetd's newer %+v", got, newer.Owned.Facts)
		}
		if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], "(fleet_facts): restored") {
			t.Errorf("journal %q, want one entry naming fleet_facts restored", j)
		}
	})
	// A value fleetd cannot read decodes as no facts: written over none, it is still a write of
	// fleet_facts, and none is put back.
	t.Run("ok/unreadable fleet_facts written over none: none put back", func(t *testing.T) {
		garbage := active
		garbage.Owned.FactsUnreadable = "fleet_facts: version 2, this fleetd reads version 1"
		inv := fleettest.NewInventory(garbage)
		s := newTestService(inv, fleettest.NewInstaller())
		out, err := s.UndoForeignWrite(context.Background(), ForeignWrite{DeviceID: 12, User: "admin", Before: active, After: garbage})
		if err != nil || out.Result != "restored" {
			t.Fatalf("UndoForeignWrite = %+v, %v", out, err)
		}
		if got := inv.Get(12).Owned; got.FactsUnreadable != "" || !got.Facts.Empty() {
			t.Errorf("fleet_facts after the undo: %+v, unreadable %q; want none", got.Facts, got.FactsUnreadable)
		}
		if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], "(fleet_facts): restored") {
			t.Errorf("journal %q, want one entry naming fleet_facts restored", j)
		}
	})
	t.Run("ok/nothing fleetd owns changed: nothing written", func(t *testing.T) {
		inv := fleettest.NewInventory(active)
		s := newTestService(inv, fleettest.NewInstaller())
		out, err := s.UndoForeignWrite(context.Background(), ForeignWrite{DeviceID: 12, User: "admin", Before: active, After: active})
		if err != nil || out.Result != "nothing-to-undo" || len(inv.JournalOf(12)) != 0 || inv.Calls.Load() != 1 {
			t.Errorf("UndoForeignWrite = %+v, %v; journal %q; %d inventory calls, want one read", out, err, inv.JournalOf(12), inv.Calls.Load())
		}
	})
}

// TestWrittenBackRequestNotCarriedOutTwice: the owner's copy read before fleetd claimed its
// provision (desired_action provision, no fleet_request) is saved whole after the claim. Through
// the webhook (UndoForeignWrite, then the reconcile) the written-back desired_action is cleared
// with fleetd's fields put back: the request keeps its one Workflow, and no second request starts.
func TestWrittenBackRequestNotCarriedOutTwice(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = ActionProvision
	copyRead := d // the owner's copy, read before the claim
	inv := fleettest.NewInventory(d)
	inst := fleettest.NewInstaller()
	s := newTestService(inv, inst)
	ctx := context.Background()
	if _, err := s.Reconcile(ctx, 12); err != nil {
		t.Fatal(err)
	}
	claimed := inv.Get(12)
	if inst.Creates() != 1 || claimed.Owned.Request == "" || claimed.Declared.DesiredAction != ActionNone {
		t.Fatalf("after the claim: %d Workflows, request %q, desired_action %q", inst.Creates(), claimed.Owned.Request, claimed.Declared.DesiredAction)
	}
	// The owner's save: every custom field as it was read.
	written := claimed
	written.Owned, written.Declared = copyRead.Owned, copyRead.Declared
	inv.Set(written)
	if _, err := s.UndoForeignWrite(ctx, ForeignWrite{DeviceID: 12, User: "owner", Before: claimed, After: written}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the webhook's reconcile, and the periodic one
		if _, err := s.Reconcile(ctx, 12); err != nil {
			t.Fatal(err)
		}
	}
	got := inv.Get(12)
	if inst.Creates() != 1 || got.Owned.Request != claimed.Owned.Request || got.Declared.DesiredAction != ActionNone {
		t.Errorf("after the written-back copy: %d Workflows, request %q (want %q), desired_action %q; want the one request, not a second",
			inst.Creates(), got.Owned.Request, claimed.Owned.Request, got.Declared.DesiredAction)
	}
}

// TestCopyWrittenBackDuringTheWrite: an event of the running request is judged on fleetd's own
// values again when its conditional write meets a conflict: another user's copy written back
// after the change-log check and before the write (the two-instance chaos run, seed 317628280:
// the other instance recorded the wipe's success, a copy read before the attestation then put
// fleet_state pending back, and this instance's Workflow event, re-read after the conflict, failed
// the wiped request as a Workflow that succeeded without an attestation). The copy is undone and
// the event recorded on fleetd's values.
func TestCopyWrittenBackDuringTheWrite(t *testing.T) {
	ctx := context.Background()
	d := fleettest.Declared(12, "node-a")
	d.Status = StatusActive
	d.Owned = Owned{State: StateWiping, Request: "wipe-aaaaaaaa", Workflow: "node-a-wipe-aaaaaaaa", Message: "Attested node-a for wipe request wipe-aaaaaaaa."}
	copyRead := d // read before the attestation
	copyRead.Owned.State, copyRead.Owned.Message = StatePending, "wipe accepted as request wipe-aaaaaaaa."
	inv := fleettest.NewInventory(d)
	log := &fleettest.ChangeLog{}
	inv.ConflictOnce[12] = func(cur *Device) { // the copy lands between the check and the write
		cur.Owned.State, cur.Owned.Message = copyRead.Owned.State, copyRead.Owned.Message
		log.Changes = append(log.Changes, DeviceChange{DeviceID: 12, User: "owner", Time: testEpoch, Before: d, After: copyRead})
	}
	s := newLoggedService(inv, log)
	if _, err := s.WorkflowChanged(ctx, 12, WorkflowStatus{Name: d.Owned.Workflow, Phase: WorkflowSucceeded}); err != nil {
		t.Fatal(err)
	}
	got := inv.Get(12)
	if got.Owned.State != StateWiped || got.Status != StatusOffline {
		t.Errorf("after the Workflow's success: fleet_state %q status %q (%s), want wiped offline", got.Owned.State, got.Status, got.Owned.Message)
	}
	j := inv.JournalOf(12)
	if len(j) != 2 || !strings.Contains(j[0], "written by owner (fleet_state, fleet_message): restored") || !strings.Contains(j[1], "succeeded: disk") {
		t.Errorf("journal %q, want the copy restored, then the wipe's success", j)
	}
}

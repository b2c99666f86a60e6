package fleet_test

import (
	"context"
	"github.com/folly-infra/fleetd/netbox/layout"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// saveCopy is a client's save of a copy of the device it read earlier (pynetbox's save()): every
// custom field as it was read, fleet_seal included, by user.
func saveCopy(inv *fleettest.NetBox, user string, copyRead fleet.Device) {
	inv.WriteAs(user, copyRead.ID, func(d *fleet.Device) {
		d.Owned, d.Seal, d.Declared = copyRead.Owned, copyRead.Seal, copyRead.Declared
	})
}

// TestWrittenBackCopy: a client that read the device earlier writes its whole custom_fields back
// (pynetbox's save()), its old seal with them. fleetd's check of the device (a webhook's or the
// backstop's) finds the values not fleetd's last write, puts back fleetd's newest own write from
// the change log, journals who wrote them, and a desired_action from a copy older than the
// current request is not taken as a new request.
func TestWrittenBackCopy(t *testing.T) {
	base := fleettest.Declared(12, "node-a")
	base.Status = fleet.StatusStaged
	configuring := base
	configuring.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", LAKSerial: "0c2d"}
	configuring = attested(configuring)
	active := configuring
	active.Owned.State, active.Owned.Message = fleet.StateActive, "Delivered."
	idle := base
	idle.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-zzzzzzzz", Workflow: "node-a-provision-zzzzzzzz"}
	idle.Declared.DesiredAction = fleet.ActionProvision // the copy was read while the owner's provision waited
	since := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	older, newer := active, active
	older.Owned.Facts = layout.Facts{Version: layout.FactsVersion, Claimed: layout.ClaimedFacts{Disks: []layout.FactDisk{{Serial: "SER-A"}}, DisksFound: 1,
		Learned: layout.Learned{Since: since, Source: layout.FactsFromEnrollment}}}
	newer.Owned.Facts = older.Owned.Facts
	newer.Owned.Facts.Claimed = layout.ClaimedFacts{Disks: []layout.FactDisk{{Serial: "SER-B"}}, DisksFound: 1,
		Learned: layout.Learned{Since: since.Add(time.Hour), Source: layout.FactsFromBootCheck}}
	rows := []struct {
		name        string
		read, now   fleet.Device        // fleetd's write the copy was read after, and fleetd's last write
		edit        func(*fleet.Device) // the client's change to its copy, if any
		want        fleet.Owned
		wantAction  fleet.Action
		wantJournal string
	}{
		{name: "ok/stale configuring after delivery: active put back, the owner's new desired_action kept",
			read: configuring, now: active, edit: func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionAttest },
			want: active.Owned, wantAction: fleet.ActionAttest,
			wantJournal: "warning: Fields owned by fleetd (fleet_state, fleet_message, fleet_seal) were written by admin at "},
		{name: "ok/copy from before the claim: request put back, its desired_action not a new request",
			read: idle, now: configuring, want: configuring.Owned, wantAction: fleet.ActionNone,
			wantJournal: "set desired_action=provision from a copy read before request provision-aaaaaaaa was claimed"},
		{name: "ok/older fleet_facts written back: the newer facts put back",
			read: older, now: newer, want: newer.Owned, wantJournal: "(fleet_facts, fleet_seal) were written by admin"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			inv := fleettest.NewNetBox(r.read)
			s := newTestService(inv, fleettest.NewInstaller())
			copyRead := inv.Get(12)
			if r.edit != nil {
				r.edit(&copyRead)
			}
			inv.Set(r.now) // fleetd's next write
			saveCopy(inv, "admin", copyRead)
			out, err := s.CheckOwnedFields(context.Background(), 12)
			if err != nil || out.Result != string(fleet.VerdictTrusted) {
				t.Fatalf("CheckOwnedFields = %+v, %v", out, err)
			}
			got := inv.Get(12)
			if !sameValues(got.Owned, r.want) || got.Declared.DesiredAction != r.wantAction {
				t.Errorf("after the repair: %+v desired_action %q, want %+v %q", got.Owned, got.Declared.DesiredAction, r.want, r.wantAction)
			}
			if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], r.wantJournal) || !strings.Contains(j[0], "restored to fleetd's write of") {
				t.Errorf("journal %q, want one entry with %q", j, r.wantJournal)
			}
			if last := inv.Changes(12); last[len(last)-1].User != fleettest.ServiceUser {
				t.Errorf("the last save is %s's, want fleetd's restore", last[len(last)-1].User)
			}
		})
	}
	// A value fleetd cannot read decodes as no facts: written over none, it is still a write of
	// fleet_facts, and none is put back.
	t.Run("ok/unreadable fleet_facts written over none: none put back", func(t *testing.T) {
		inv := fleettest.NewNetBox(active)
		s := newTestService(inv, fleettest.NewInstaller())
		inv.Set(active)
		inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned.FactsUnreadable = "fleet_facts: version 2, this fleetd reads version 1" })
		if out, err := s.CheckOwnedFields(context.Background(), 12); err != nil {
			t.Fatalf("CheckOwnedFields = %+v, %v", out, err)
		}
		if got := inv.Get(12).Owned; got.FactsUnreadable != "" || !got.Facts.Empty() {
			t.Errorf("fleet_facts after the repair: %+v, unreadable %q; want none", got.Facts, got.FactsUnreadable)
		}
		if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], "(fleet_facts) were written by admin") {
			t.Errorf("journal %q, want one entry naming fleet_facts restored", j)
		}
	})
	t.Run("ok/nothing fleetd owns changed: nothing written", func(t *testing.T) {
		inv := fleettest.NewNetBox(active)
		s := newTestService(inv, fleettest.NewInstaller())
		inv.Set(active)
		inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Declared.DiskSerial = "S-NEW" }) // the owner's own field
		calls := inv.Calls.Load()
		out, err := s.CheckOwnedFields(context.Background(), 12)
		if err != nil || out.Result != string(fleet.VerdictTrusted) || len(inv.JournalOf(12)) != 0 || inv.Calls.Load()-calls != 2 {
			t.Errorf("CheckOwnedFields = %+v, %v; journal %q; %d inventory calls, want the device and its change log read",
				out, err, inv.JournalOf(12), inv.Calls.Load()-calls)
		}
	})
}

// sameValues compares the values of two Owned as fleetd reads them (its JSON fields by value).
func sameValues(a, b fleet.Owned) bool {
	return a.State == b.State && a.Message == b.Message && a.Request == b.Request && a.Workflow == b.Workflow &&
		a.LAKSerial == b.LAKSerial && a.LDevIDSerial == b.LDevIDSerial && a.Identity.Request == b.Identity.Request &&
		a.Facts.Equal(b.Facts) && a.FactsUnreadable == b.FactsUnreadable && a.LastBootCheck.Equal(b.LastBootCheck)
}

// TestWrittenBackRequestNotCarriedOutTwice: the owner's copy read before fleetd claimed its
// provision (desired_action provision, no fleet_request) is saved whole after the claim. The
// webhook's reconcile puts fleetd's fields back and clears the written-back desired_action: the
// request keeps its one Workflow, and no second request starts.
func TestWrittenBackRequestNotCarriedOutTwice(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Declared.DesiredAction = fleet.ActionProvision
	inv := fleettest.NewNetBox(d)
	inst := fleettest.NewInstaller()
	s := newTestService(inv, inst)
	copyRead := inv.Get(12) // the owner's copy, read before the claim
	ctx := context.Background()
	if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
		t.Fatal(err)
	}
	claimed := inv.Get(12)
	if inst.Creates() != 1 || claimed.Owned.Request == "" || claimed.Declared.DesiredAction != fleet.ActionNone {
		t.Fatalf("after the claim: %d Workflows, request %q, desired_action %q", inst.Creates(), claimed.Owned.Request, claimed.Declared.DesiredAction)
	}
	saveCopy(inv, fleettest.Owner, copyRead) // every custom field as it was read
	for range 2 {                            // the webhook's reconcile, and the periodic one
		if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
			t.Fatal(err)
		}
	}
	got := inv.Get(12)
	if inst.Creates() != 1 || got.Owned.Request != claimed.Owned.Request || got.Declared.DesiredAction != fleet.ActionNone {
		t.Errorf("after the written-back copy: %d Workflows, request %q (want %q), desired_action %q; want the one request, not a second",
			inst.Creates(), got.Owned.Request, claimed.Owned.Request, got.Declared.DesiredAction)
	}
}

// TestCopyWrittenBackDuringTheWrite: an event of the running request is judged on fleetd's own
// values again when its conditional write meets a conflict: another user's copy written back
// after the read and before the write (the two-instance chaos run, seed 317628280: the other
// instance recorded the wipe's success, a copy read before the attestation then put fleet_state
// pending back, and this instance's Workflow event, re-read after the conflict, failed the wiped
// request as a Workflow that succeeded without an attestation). The copy is put back and the
// event recorded on fleetd's values.
func TestCopyWrittenBackDuringTheWrite(t *testing.T) {
	ctx := context.Background()
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusActive
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "wipe-aaaaaaaa", Workflow: "node-a-wipe-aaaaaaaa", Message: "wipe accepted as request wipe-aaaaaaaa."}
	inv := fleettest.NewNetBox(d)
	s := newTestService(inv, fleettest.NewInstaller())
	copyRead := inv.Get(12) // read before the attestation
	d.Owned.State, d.Owned.Message = fleet.StateWiping, "Attested node-a for wipe request wipe-aaaaaaaa."
	inv.Set(d)
	inv.ConflictBy[12] = fleettest.Owner
	inv.ConflictOnce[12] = func(cur *fleet.Device) { cur.Owned, cur.Seal = copyRead.Owned, copyRead.Seal } // lands between the read and the write
	if _, err := s.Requests.WorkflowChanged(ctx, 12, fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowSucceeded}); err != nil {
		t.Fatal(err)
	}
	got := inv.Get(12)
	// No receipt was recorded: the Workflow's success ends the wipe unconfirmed (receipt.go).
	if got.Owned.State != fleet.StateUnconfirmed || got.Status != fleet.StatusFailed {
		t.Errorf("after the Workflow's success: fleet_state %q status %q (%s), want unconfirmed failed", got.Owned.State, got.Status, got.Owned.Message)
	}
	j := inv.JournalOf(12)
	if len(j) != 2 || !strings.Contains(j[0], "(fleet_state, fleet_message, fleet_seal) were written by owner") || !strings.Contains(j[1], "wipe-aaaaaaaa unconfirmed") {
		t.Errorf("journal %q, want the copy restored, then the wipe's end", j)
	}
}

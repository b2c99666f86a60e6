package fleet_test

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	. "github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

func newLoggedService(inv Inventory, log ChangeLog) testService {
	clock := fleettest.NewClock(testEpoch)
	s, err := NewService(Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: "fleetd"},
		Deps{Inventory: inv, ChangeLog: log, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock,
			Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1))})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock}
}

// TestReconcileUndoesLoggedWrites: the periodic reconcile is the backstop for a written-back copy
// whose webhook NetBox dropped: it reads the change log since its last run, undoes what still
// stands of other users' saves of fleetd's fields, and does not take a written-back request again.
func TestReconcileUndoesLoggedWrites(t *testing.T) {
	base := fleettest.Declared(12, "node-a")
	base.Status = StatusActive
	claimed := base // fleetd's claim of the owner's provision: desired_action cleared, a new request
	claimed.Owned = Owned{State: StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", LAKSerial: "0c2d"}
	old := base // the owner's copy, read before the claim: the old request and its desired_action
	old.Owned = Owned{State: StateActive, Request: "provision-zzzzzzzz", Workflow: "node-a-provision-zzzzzzzz", LAKSerial: "0b1a"}
	old.Declared.DesiredAction = ActionProvision
	at := func(m int) time.Time { return testEpoch.Add(time.Duration(m) * time.Minute) }

	rows := []struct {
		name        string
		changes     []DeviceChange
		now         Device // NetBox's device at the reconcile
		wantRequest string
		wantAction  Action
		wantJournal string // "" for none
	}{
		{name: "ok/stale copy whose webhook was lost: fleetd's fields back, its desired_action not a request",
			changes: []DeviceChange{
				{DeviceID: 12, User: "fleetd", Time: at(-3), Before: old, After: claimed},
				{DeviceID: 12, User: "owner", Time: at(-2), Before: claimed, After: old},
			}, now: old, wantRequest: "provision-aaaaaaaa", wantAction: ActionNone,
			wantJournal: "warning: Fields owned by fleetd were written by owner (fleet_request, fleet_workflow, lak_serial): restored. The same write set desired_action=provision"},
		{name: "ok/already undone by the webhook: nothing written",
			changes: []DeviceChange{
				{DeviceID: 12, User: "owner", Time: at(-2), Before: claimed, After: old},
				{DeviceID: 12, User: "fleetd", Time: at(-1), Before: old, After: claimed},
			}, now: claimed, wantRequest: "provision-aaaaaaaa"},
		{name: "ok/a field fleetd wrote again since is fleetd's: only the rest is put back",
			changes: []DeviceChange{
				{DeviceID: 12, User: "owner", Time: at(-2), Before: claimed, After: old},
				{DeviceID: 12, User: "fleetd", Time: at(-1), Before: old, After: func() Device { d := old; d.Owned.Request = "attest-bbbbbbbb"; return d }()},
			}, now: func() Device {
				d := old
				d.Owned.Request = "attest-bbbbbbbb"
				d.Declared.DesiredAction = ActionNone
				return d
			}(),
			wantRequest: "attest-bbbbbbbb",
			wantJournal: "written by owner (fleet_workflow, lak_serial): restored."},
		{name: "ok/two stale saves: the value before the first is put back",
			changes: []DeviceChange{
				{DeviceID: 12, User: "owner", Time: at(-2), Before: claimed, After: func() Device { d := claimed; d.Owned.LAKSerial = "0999"; return d }()},
				{DeviceID: 12, User: "script", Time: at(-1), Before: func() Device { d := claimed; d.Owned.LAKSerial = "0999"; return d }(), After: old},
			}, now: old, wantRequest: "provision-aaaaaaaa",
			wantJournal: "written by owner, script (fleet_request, fleet_workflow, lak_serial): restored."},
		{name: "ok/older than the first run's lookback: not read",
			changes: []DeviceChange{{DeviceID: 12, User: "owner", Time: at(-90), Before: claimed, After: old}},
			now:     func() Device { d := old; d.Declared.DesiredAction = ActionNone; return d }(), wantRequest: "provision-zzzzzzzz"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			inv := fleettest.NewInventory(r.now)
			log := &fleettest.ChangeLog{Changes: r.changes}
			s := newLoggedService(inv, log)
			if _, err := s.ReconcileAll(context.Background()); err != nil {
				t.Fatalf("ReconcileAll: %v", err)
			}
			got := inv.Get(12)
			if got.Owned.Request != r.wantRequest || got.Declared.DesiredAction != r.wantAction {
				t.Errorf("after the reconcile: request %q desired_action %q, want %q %q", got.Owned.Request,
					got.Declared.DesiredAction, r.wantRequest, r.wantAction)
			}
			j := inv.JournalOf(12)
			if r.wantJournal == "" && len(j) != 0 || r.wantJournal != "" && (len(j) != 1 || !strings.Contains(j[0], r.wantJournal)) {
				t.Errorf("journal %q, want %q", j, r.wantJournal)
			}
			if q := log.Queries[0]; !q.Since.Equal(testEpoch.Add(-time.Hour)) || q.ExceptUser != "fleetd" || q.DeviceID != 0 {
				t.Errorf("first query %+v, want every device's saves by others since an hour before the start", q)
			}
		})
	}
	t.Run("ok/the next run reads from the last run's start, with an overlap", func(t *testing.T) {
		log := &fleettest.ChangeLog{}
		s := newLoggedService(fleettest.NewInventory(claimed), log)
		_, _ = s.ReconcileAll(context.Background())
		s.clock.Advance(30 * time.Second)
		_, _ = s.ReconcileAll(context.Background())
		if len(log.Queries) != 2 || !log.Queries[1].Since.Equal(testEpoch.Add(-2*time.Minute)) {
			t.Errorf("queries %+v, want the second since 2 minutes before the first run", log.Queries)
		}
	})
}

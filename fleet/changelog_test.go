package fleet_test

import (
	"context"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// newLoggedService is a test service whose change-log backstop reads log.
func newLoggedService(inv *fleettest.NetBox, log fleet.ChangeLog) testService {
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, ChangeLog: log, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock,
			Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1))})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock}
}

// queryLog is a ChangeLog that keeps the queries it answers.
type queryLog struct {
	fleet.ChangeLog
	mu      sync.Mutex
	queries []fleet.ChangeQuery
}

func (l *queryLog) DeviceChanges(ctx context.Context, q fleet.ChangeQuery) ([]fleet.DeviceChange, error) {
	l.mu.Lock()
	l.queries = append(l.queries, q)
	l.mu.Unlock()
	return l.ChangeLog.DeviceChanges(ctx, q)
}

// TestReconcileRepairsLoggedWrites: the periodic reconcile is the backstop for another user's write
// of fleetd's fields whose webhook NetBox dropped: it reads the change log since its last run (the
// whole retention after a start), checks every device such a save touched, puts fleetd's own
// values back, and does not take a written-back request again. A copy whose seal still verifies
// (a replay) is caught there, not by the listing's seal check.
func TestReconcileRepairsLoggedWrites(t *testing.T) {
	base := fleettest.Declared(12, "node-a")
	base.Status = fleet.StatusActive
	old := base // the owner's copy, read before the claim: the old request and its desired_action
	old.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-zzzzzzzz", Workflow: "node-a-provision-zzzzzzzz", LAKSerial: "0b1a"}
	old.Declared.DesiredAction = fleet.ActionProvision
	claimed := base // fleetd's claim of the owner's provision: desired_action cleared, a new request
	claimed.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", LAKSerial: "0c2d"}

	t.Run("ok/stale copy whose webhook was lost: fleetd's fields back, its desired_action not a request", func(t *testing.T) {
		inv := fleettest.NewNetBox(old)
		log := &queryLog{ChangeLog: inv}
		s := newLoggedService(inv, log)
		copyRead := inv.Get(12)
		inv.Set(claimed)
		s.clock.Advance(time.Minute)
		saveCopy(inv, fleettest.Owner, copyRead)
		if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
			t.Fatalf("ReconcileAll: %v", err)
		}
		got := inv.Get(12)
		if got.Owned.Request != "provision-aaaaaaaa" || got.Owned.LAKSerial != "0c2d" || got.Declared.DesiredAction != fleet.ActionNone {
			t.Errorf("after the reconcile: request %q lak_serial %q desired_action %q, want fleetd's claim back and no request",
				got.Owned.Request, got.Owned.LAKSerial, got.Declared.DesiredAction)
		}
		j := inv.JournalOf(12)
		if len(j) != 1 || !strings.Contains(j[0], "were written by owner") || !strings.Contains(j[0], "set desired_action=provision from a copy read before request provision-aaaaaaaa") {
			t.Errorf("journal %q, want the restore with the written-back desired_action cleared", j)
		}
		if q := log.queries[0]; !q.Since.Equal(s.clock.Now().Add(-fleet.DefaultChangeLogRetention)) || q.ExceptUser != fleettest.ServiceUser || q.DeviceID != 0 {
			t.Errorf("first query %+v, want every device's saves by others over NetBox's whole retention", q)
		}
	})
	t.Run("ok/already repaired: nothing written", func(t *testing.T) {
		inv := fleettest.NewNetBox(old)
		s := newLoggedService(inv, inv)
		copyRead := inv.Get(12)
		inv.Set(claimed)
		saveCopy(inv, fleettest.Owner, copyRead)
		if _, err := s.CheckOwnedFields(context.Background(), 12); err != nil { // the webhook's check
			t.Fatal(err)
		}
		saves := len(inv.Changes(12))
		if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
			t.Fatalf("ReconcileAll: %v", err)
		}
		if len(inv.Changes(12)) != saves || len(inv.JournalOf(12)) != 1 {
			t.Errorf("%d saves after the reconcile (want %d) and journal %q: the repaired device was written again", len(inv.Changes(12)), saves, inv.JournalOf(12))
		}
	})
	t.Run("ok/the next run reads from the last run's start, with an overlap", func(t *testing.T) {
		inv := fleettest.NewNetBox(claimed)
		log := &queryLog{ChangeLog: inv}
		s := newLoggedService(inv, log)
		_, _ = s.Requests.ReconcileAll(context.Background())
		s.clock.Advance(30 * time.Second)
		_, _ = s.Requests.ReconcileAll(context.Background())
		if len(log.queries) != 2 || !log.queries[1].Since.Equal(testEpoch.Add(-2*time.Minute)) {
			t.Errorf("queries %+v, want the second since 2 minutes before the first run", log.queries)
		}
	})
}

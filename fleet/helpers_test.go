package fleet_test

import (
	"math/rand"
	"testing"
	"time"

	. "github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// testService is a service on in-memory ports with a clock and pending store the test controls.
type testService struct {
	*Service
	clock   *fleettest.Clock
	pending *Pending
}

func newTestService(inv Inventory, inst Installer) testService {
	clock := fleettest.NewClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	pending, err := NewPending(PendingConfig{Clock: clock, TTL: time.Hour})
	if err != nil {
		panic(err)
	}
	s, err := NewService(Config{FleetdURL: "http://spore:8080"}, Deps{Inventory: inv, Installer: inst,
		Catalog: fleettest.Catalog(), Clock: clock, Pending: pending, Random: rand.New(rand.NewSource(1))})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock, pending: pending}
}

func (s testService) hasPending(id int64) bool {
	_, ok := s.pending.Peek(id)
	return ok
}

const attestedUUID = "4c4c4544-0042-3510-8052-b4c04f4e3232"

func putPending(t *testing.T, s testService, d Device) {
	t.Helper()
	_, err := s.pending.Put(d.ID, PendingEntry{Device: d.Name, AttestedUUID: attestedUUID,
		Address: d.IP(), Config: NodeConfig{Kind: KindTalos, Body: []byte("machine: {}"), Summary: "Talos worker config"}})
	if err != nil {
		t.Fatal(err)
	}
}

package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// updateIfMatch is the service's conditional write of device 1 as the service reads it.
func updateIfMatch(t *testing.T, inv *fleettest.NetBox, decide fleet.Decide) (fleet.Device, bool, error) {
	t.Helper()
	s := newTestService(inv, fleettest.NewInstaller())
	d, err := s.ReadDevice(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return s.UpdateIfMatch(context.Background(), d, decide)
}

func TestUpdateIfMatch(t *testing.T) {
	msg := "recorded"
	setMessage := func(want fleet.State, calls *int) fleet.Decide {
		return func(d fleet.Device) (fleet.Patch, bool, error) {
			*calls++
			if d.Owned.State != want {
				return fleet.Patch{}, false, nil
			}
			return fleet.Patch{Message: &msg}, true, nil
		}
	}
	t.Run("ok/written", func(t *testing.T) {
		inv := fleettest.NewNetBox(fleettest.Declared(1, "a"))
		calls := 0
		got, wrote, err := updateIfMatch(t, inv, setMessage(fleet.StateNone, &calls))
		if err != nil || !wrote || calls != 1 || got.Owned.Message != msg || len(got.MACs) == 0 {
			t.Fatalf("wrote=%v calls=%d message=%q macs=%v err=%v", wrote, calls, got.Owned.Message, got.MACs, err)
		}
	})
	t.Run("ok/conflict-redecided-and-written", func(t *testing.T) {
		inv := fleettest.NewNetBox(fleettest.Declared(1, "a"))
		inv.ConflictOnce[1] = func(d *fleet.Device) { d.Owned.Workflow = "theirs" }
		calls := 0
		got, wrote, err := updateIfMatch(t, inv, setMessage(fleet.StateNone, &calls))
		if err != nil || !wrote || calls != 2 || got.Owned.Workflow != "theirs" || got.Owned.Message != msg {
			t.Fatalf("wrote=%v calls=%d owned=%+v err=%v", wrote, calls, got.Owned, err)
		}
	})
	t.Run("ok/conflict-redecided-nothing-to-write", func(t *testing.T) {
		inv := fleettest.NewNetBox(fleettest.Declared(1, "a"))
		inv.ConflictOnce[1] = func(d *fleet.Device) { d.Owned.State = fleet.StateActive }
		calls := 0
		got, wrote, err := updateIfMatch(t, inv, setMessage(fleet.StateNone, &calls))
		if err != nil || wrote || calls != 2 || got.Owned.State != fleet.StateActive {
			t.Fatalf("wrote=%v calls=%d state=%q err=%v", wrote, calls, got.Owned.State, err)
		}
		if inv.Get(1).Owned.Message != "" {
			t.Error("the message was written although the re-read device no longer needed it")
		}
	})
	t.Run("refuse/decide-error-writes-nothing", func(t *testing.T) {
		inv := fleettest.NewNetBox(fleettest.Declared(1, "a"))
		boom := errors.New("boom")
		_, wrote, err := updateIfMatch(t, inv, func(fleet.Device) (fleet.Patch, bool, error) {
			return fleet.Patch{Message: &msg}, true, boom
		})
		if !errors.Is(err, boom) || wrote || inv.Get(1).Owned.Message != "" {
			t.Fatalf("wrote=%v err=%v message=%q", wrote, err, inv.Get(1).Owned.Message)
		}
	})
	t.Run("refuse/keeps-changing", func(t *testing.T) {
		inv := fleettest.NewNetBox(fleettest.Declared(1, "a"))
		calls := 0
		_, wrote, err := updateIfMatch(t, inv, func(d fleet.Device) (fleet.Patch, bool, error) {
			calls++
			inv.ConflictOnce[1] = func(d *fleet.Device) { d.Owned.Workflow += "x" } // another writer, every time
			return fleet.Patch{Message: &msg}, true, nil
		})
		if !errors.Is(err, fleet.ErrConflict) || wrote || calls != 6 {
			t.Fatalf("wrote=%v calls=%d err=%v, want ErrConflict after 6 decisions", wrote, calls, err)
		}
	})
}

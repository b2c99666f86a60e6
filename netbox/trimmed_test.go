package netbox_test

import (
	"context"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// movingClock is a clock the test moves; every reading is a microsecond later than the last.
type movingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

// advance moves the clock d forward.
func (c *movingClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestTrimmedChangeLog: NetBox keeps its change log for CHANGELOG_RETENTION (90 days by default)
// and its housekeeping deletes what is older (the emulator's PruneChangelog). A device fleetd
// sealed and has not saved since the window is trusted on its seal alone — no save within the log
// touched its fields, and a copy written back is itself a new save the log keeps. A copy of an
// older seal written back after the prune is seen, and with no write of fleetd's left in the log
// to put back, the device is marked untrusted; so is one whose editor's save outlived fleetd's.
func TestTrimmedChangeLog(t *testing.T) {
	const retention = 90 * 24 * time.Hour
	ctx := context.Background()
	active, wiped := fleet.StateActive, fleet.StateWiped
	lak, none := "0b01", ""
	rows := []struct {
		name                  string
		copyBefore, copyAfter bool // the editor saves its copy within the window before the prune, or after it
		want                  fleet.State
	}{
		{name: "ok/sealed by fleetd, its saves older than the log", want: fleet.StateWiped},
		{name: "refuse/an older seal copied back after the prune", copyAfter: true, want: fleet.StateUntrusted},
		{name: "refuse/an editor's save outlived fleetd's own", copyBefore: true, want: fleet.StateUntrusted},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			clock := &movingClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			e := newEnvAt(t, 0, clock.Now)
			e.fleetdWrite(t, fleet.Patch{ClearDesiredAction: true, State: &active, LAKSerial: &lak})
			old, _ := e.emu.CustomFieldData(e.node1) // an editor's copy of the active node
			e.fleetdWrite(t, fleet.Patch{State: &wiped, LAKSerial: &none})
			clock.advance(retention / 2)
			if r.copyBefore {
				e.ownerSave(t, old)
			}
			clock.advance(retention/2 + 24*time.Hour)
			if n := e.emu.PruneChangelog(retention); n != 2 {
				t.Fatalf("the prune deleted %d records, want fleetd's two saves", n)
			}
			if r.copyAfter {
				e.ownerSave(t, old)
			}
			s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
				fleet.Deps{Seal: fleettest.SealKeys(), NetBox: e.client, ChangeLog: e.client, Installer: fleettest.NewInstaller(),
					Catalog: fleettest.Catalog(), Clock: clock, Random: rand.New(rand.NewSource(1)), Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatalf("ReconcileAll: %v", err)
			}
			got, err := e.client.Device(ctx, e.node1)
			if err != nil {
				t.Fatal(err)
			}
			if got.Owned.State != r.want || got.Owned.LAKSerial != "" {
				t.Errorf("after the reconcile: fleet_state %s lak_serial %q, want %s and none", got.Owned.State, got.Owned.LAKSerial, r.want)
			}
			untrusted := 0
			for _, j := range e.emu.Journal(e.node1) {
				if strings.Contains(j.Comments, "fleetd cannot vouch for the fields it owns") {
					untrusted++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[r.want == fleet.StateUntrusted]; untrusted != want {
				t.Errorf("%d journal entries mark the device untrusted, want %d", untrusted, want)
			}
		})
	}
}

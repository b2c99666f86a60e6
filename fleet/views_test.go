package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestViewReportsMissingBootChecks: an active node whose last accepted check is older than two
// hours is reported missing (docs/design.md §5); a fresh one, an inactive one, or one never checked is not.
func TestViewReportsMissingBootChecks(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rows := []struct {
		name    string
		state   fleet.State
		status  fleet.Status
		last    time.Duration // how long ago the last check was; 0 = never
		missing bool
	}{
		{"ok/checked an hour ago", fleet.StateActive, fleet.StatusActive, time.Hour, false},
		{"refuse/checked three hours ago: missing", fleet.StateActive, fleet.StatusActive, 3 * time.Hour, true},
		{"ok/checked exactly boot_check.missing_after (2h) ago: not yet missing", fleet.StateActive, fleet.StatusActive, 2 * time.Hour, false},
		{"refuse/checked a second longer ago: missing", fleet.StateActive, fleet.StatusActive, 2*time.Hour + time.Second, true},
		{"ok/decommissioning nodes are not expected to check", fleet.StateActive, fleet.StatusDecommissioning, 3 * time.Hour, false},
		{"ok/not active", fleet.StateWiped, fleet.StatusOffline, 3 * time.Hour, false},
		{"ok/never checked (the none-status alert covers it)", fleet.StateActive, fleet.StatusActive, 0, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned.State = r.status, r.state
			if r.last > 0 {
				d.Owned.LastBootCheck = now.Add(-r.last)
			}
			s := newTestService(fleettest.NewNetBox(d), fleettest.NewInstaller())
			v, err := s.Views.View(context.Background(), "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if v.BootCheckMissing != r.missing {
				t.Fatalf("missing = %v, want %v", v.BootCheckMissing, r.missing)
			}
		})
	}
}

// TestViewReportsPendingConfig: a device view says a configuration is pending while the
// provision's attested configuration waits for its fetch, and not once it expired or was
// delivered.
func TestViewReportsPendingConfig(t *testing.T) {
	for _, r := range []struct {
		name    string
		state   fleet.State
		advance time.Duration // the clock's move after the attestation (the configuration waits an hour)
		pending bool
	}{
		{"ok/attested, waiting for its fetch", fleet.StateConfiguring, 0, true},
		{"refuse/expired", fleet.StateConfiguring, 2 * time.Hour, false},
		{"refuse/delivered", fleet.StateActive, 0, false},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned = fleet.StatusStaged, fleet.Owned{State: r.state, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
			s := newTestService(fleettest.NewNetBox(attested(d)), fleettest.NewInstaller())
			s.clock.Advance(r.advance)
			v, err := s.Views.View(context.Background(), "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if v.PendingConfig != r.pending {
				t.Errorf("pending config %v, want %v", v.PendingConfig, r.pending)
			}
		})
	}
}

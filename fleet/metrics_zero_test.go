package fleet

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCountersStartAtZero: a fresh fleetd already exposes the series its alerts take increase()
// of, at 0, so that the first failure after a (re)start is an increase (docs/operate.md,
// "Metrics and alerts"; examples/monitoring/fleetd-rules.test.yaml replays the shapes).
func TestCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, nil, SystemClock{}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP fleetd_reconcile_runs_total Periodic reconciles over all devices, by result (ok, error).
# TYPE fleetd_reconcile_runs_total counter
fleetd_reconcile_runs_total{result="error"} 0
fleetd_reconcile_runs_total{result="ok"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fleetd_reconcile_runs_total"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{"fleetd_requests_total": 18, "fleetd_wipe_receipts_total": 6, "fleetd_owned_field_writes_total": 4,
		"fleetd_config_fetches_total": 4, "fleetd_boot_checks_total": 3, "fleetd_cert_renewals_total": 6,
		"fleetd_inventory_checks_total": 2, "fleetd_authz_decisions_total": 6, "fleetd_spire_bans_total": 3,
		"fleetd_inventory_differences": 0} { // a gauge of what a check found: none before the first (TestInventoryMetric)
		got, err := testutil.GatherAndCount(reg, name)
		if err != nil || got != n {
			t.Errorf("%s: %d series at start (%v), want %d", name, got, err, n)
		}
	}
}

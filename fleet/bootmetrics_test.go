package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"math/rand"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/pki"
)

// TestNodeMetrics: what the fleet-wide counts (fleetd_active_nodes, fleetd_nodes_attention) and
// the per-device series say of the nodes the reconcile listed (docs/operate.md, "Metrics and
// alerts"): only active nodes count, a node with no check yet counts as none, a class the
// catalogue does not have as unknown, a check exactly boot_check.missing_after old is not yet
// missing, and a node's current LAK certificate gives its expiry series.
func TestNodeMetrics(t *testing.T) {
	const missingAfter = 2 * time.Hour
	clock := fleettest.NewClock(testEpoch)
	now := testEpoch
	active := func(id int64, name string, outcome fleet.BootCheck, last time.Time) fleet.Device {
		d := fleettest.Declared(id, name)
		d.Status, d.Owned = fleet.StatusActive, fleet.Owned{State: fleet.StateActive, BootCheck: outcome, LastBootCheck: last}
		return d
	}
	_, lak := issueLAK(t, clock)
	withLAK := active(7, "node-certs", fleet.BootCheckOK, now.Add(-time.Minute))
	withLAK.Owned.LAKSerial, withLAK.Owned.Identity.LAK.Chain = lak.SerialHex(), lak.DER()
	gone := active(6, "node-odd", fleet.BootCheckDrift, now.Add(-time.Minute))
	gone.Declared.Class = "a-class-since-removed"
	decommissioning := active(5, "node-leaving", fleet.BootCheckOK, now.Add(-time.Minute))
	decommissioning.Status = fleet.StatusDecommissioning
	wiped := fleettest.Declared(4, "node-wiped")
	wiped.Owned.State = fleet.StateWiped
	inv := fleettest.NewNetBox(
		active(1, "node-ok", fleet.BootCheckOK, now.Add(-time.Hour)),
		active(2, "node-at-the-bound", fleet.BootCheckOK, now.Add(-missingAfter)),
		active(3, "node-missing", fleet.BootCheckFailed, now.Add(-missingAfter-time.Second)),
		wiped, decommissioning, gone, withLAK,
		active(8, "node-new", fleet.BootCheckNone, time.Time{}),
	)
	inv.Clock = clock
	fleetReg, deviceReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser, BootCheckMissingAfter: missingAfter},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock,
			Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)), Registry: fleetReg, DeviceRegistry: deviceReg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		reg    *prometheus.Registry
		metric string
		labels map[string]string
		want   float64 // -1: no such series
	}{
		{"ok/active nodes with an ok check", fleetReg, "fleetd_active_nodes", map[string]string{"class": "talos-worker", "boot_check": "ok"}, 3},
		{"ok/a failed check", fleetReg, "fleetd_active_nodes", map[string]string{"class": "talos-worker", "boot_check": "failed"}, 1},
		{"ok/no check yet counts as none", fleetReg, "fleetd_active_nodes", map[string]string{"class": "talos-worker", "boot_check": "none"}, 1},
		{"ok/a class the catalogue does not have counts as unknown", fleetReg, "fleetd_active_nodes", map[string]string{"class": "unknown", "boot_check": "drift"}, 1},
		{"ok/every catalogue class has its series, at 0", fleetReg, "fleetd_active_nodes", map[string]string{"class": "worker-g2", "boot_check": "ok"}, 0},
		{"refuse/a removed class is not its own series", fleetReg, "fleetd_active_nodes", map[string]string{"class": "a-class-since-removed", "boot_check": "drift"}, -1},
		{"ok/a check past missing_after is missing; one exactly that old is not", fleetReg, "fleetd_nodes_attention", map[string]string{"class": "talos-worker", "reason": "boot_check_missing"}, 1},
		{"ok/a node's age", deviceReg, "fleetd_device_boot_check_age_seconds", map[string]string{"device": "node-at-the-bound"}, missingAfter.Seconds()},
		{"ok/a node's outcome", deviceReg, "fleetd_device_boot_check_status", map[string]string{"device": "node-missing", "outcome": "failed"}, 1},
		{"ok/a node with no check yet", deviceReg, "fleetd_device_boot_check_status", map[string]string{"device": "node-new", "outcome": "none"}, 1},
		{"refuse/a node with no check has no age", deviceReg, "fleetd_device_boot_check_age_seconds", map[string]string{"device": "node-new"}, -1},
		{"ok/the current LAK's expiry", deviceReg, "fleetd_device_cert_expiry_timestamp_seconds", map[string]string{"device": "node-certs", "profile": "lak"}, float64(lak.Leaf.NotAfter.Unix())},
		{"refuse/a wiped device is no node", deviceReg, "fleetd_device_boot_check_status", map[string]string{"device": "node-wiped"}, -1},
		{"refuse/a decommissioning device is no node", deviceReg, "fleetd_device_boot_check_status", map[string]string{"device": "node-leaving"}, -1},
	} {
		if got := gaugeValue(t, c.reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s: %s%v = %g, want %g (-1: no series)", c.name, c.metric, c.labels, got, c.want)
		}
	}
}

// gaugeValue is the value of the series of metric whose labels include labels (-1: none); more
// than one such series fails the test.
func gaugeValue(t *testing.T, reg *prometheus.Registry, metric string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return -1
	case 1:
		return found[0].GetGauge().GetValue()
	}
	t.Fatalf("%s%v: %d series", metric, labels, len(found))
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// issueLAK is a LAK certificate for node-certs from a fresh LAK CA's issuer (lifetimes 24 h,
// renewal points the default), issued at the clock's time.
func issueLAK(t *testing.T, clock *fleettest.Clock) (*pki.Issuer, *pki.Certificate) {
	t.Helper()
	rnd := mrand.NewChaCha8([32]byte{9})
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Rand: rnd, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: 24 * time.Hour, LAKLifetime: 24 * time.Hour, Rand: rnd, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		t.Fatal(err)
	}
	lak, err := iss.IssueLAK(pki.Identity{DeviceName: "node-certs", HWSerialNum: []byte{1}}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return iss, lak
}

// histogram is the sample count and sum of the one series of histogram metric.
func histogram(t *testing.T, reg *prometheus.Registry, metric string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metric && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no one series of %s in the registry", metric)
	return 0, 0
}

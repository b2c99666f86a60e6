package fleet

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// sealMetrics say, after each listing of the fleet, how its devices' owned fields are sealed:
// fleet-wide counts only, never a series per device (docs/operate.md, "Seal keys").
type sealMetrics struct {
	byKey      *prometheus.GaugeVec // devices by the key of their valid seal, "none" for unsealed values
	unknownKey prometheus.Gauge
	failing    prometheus.Gauge
	untrusted  prometheus.Gauge
	brake      prometheus.Gauge
}

func newSealMetrics() *sealMetrics {
	return &sealMetrics{
		byKey: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetd_sealed_devices",
			Help: "Devices by the seal key of their owned fields as the last listing found them (key: a configured key id, or none for values not sealed yet); a key rotation is done when the old key's count is 0.",
		}, []string{"key"}),
		unknownKey: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_seal_unknown_key_devices",
			Help: "Devices sealed under a key id this fleetd is not configured with, as the last listing found them: nothing is decided on them until the key is added.",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_seal_failing_devices",
			Help: "Devices whose seal did not verify in the last listing (fleetd repairs them from NetBox's change log).",
		}),
		untrusted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_untrusted_devices",
			Help: "Devices whose fleet_state is untrusted: fleetd found values of its fields it did not write and nothing of its own to put back; an owner's new request brings each back.",
		}),
		brake: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_seal_brake",
			Help: "1 while the seal brake holds: so many devices fail their seal checks that fleetd marks none untrusted (a key deployed wrong, not a forgery).",
		}),
	}
}

func (m *sealMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.byKey, m.unknownKey, m.failing, m.untrusted, m.brake}
}

// atZero creates the per-key series of the configured keys at 0.
func (m *sealMetrics) atZero(keys *SealKeys) error {
	var errs []error
	for _, id := range append(keys.IDs(), "none") {
		_, err := m.byKey.GetMetricWithLabelValues(id)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// observe records a listing's seals and whether the brake holds.
func (m *sealMetrics) observe(devices []Device, keys *SealKeys, brake bool) {
	byKey := map[string]int{"none": 0}
	for _, id := range keys.IDs() {
		byKey[id] = 0
	}
	unknown, failing, untrusted := 0, 0, 0
	for _, d := range devices {
		switch t := d.Trust; {
		case t.Verdict == VerdictUnknownKey:
			unknown++
		case t.Verdict == VerdictUntrusted:
			failing++
		case t.Verdict == VerdictUnsealed:
			byKey["none"]++
		case t.Seal.Result == SealValid:
			byKey[t.Seal.KeyID]++
		}
		if d.Owned.State == StateUntrusted {
			untrusted++
		}
	}
	for id, n := range byKey {
		m.byKey.WithLabelValues(id).Set(float64(n))
	}
	m.unknownKey.Set(float64(unknown))
	m.failing.Set(float64(failing))
	m.untrusted.Set(float64(untrusted))
	b := 0.0
	if brake {
		b = 1
	}
	m.brake.Set(b)
}

package fleet

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// bootCheckCollector exports each device's boot-check age and outcome (docs/design.md §5), and
// its current certificates' expiry and renewal point, from the device list of the last
// reconcile. Ages are computed at scrape time, so they grow between reconciles as they do in
// reality; a device leaves the metrics when it stops being an active node.
type bootCheckCollector struct {
	clock   Clock
	age     *prometheus.Desc
	status  *prometheus.Desc
	expiry  *prometheus.Desc
	renewal *prometheus.Desc
	times   func(Device) (ldevid, lak CertTimes)

	mu      sync.Mutex
	devices []bootCheckSample
}

type bootCheckSample struct {
	name, class string
	last        time.Time
	outcome     BootCheck
	ldevid, lak CertTimes
}

func newBootCheckCollector(clock Clock) *bootCheckCollector {
	return &bootCheckCollector{
		clock: clock,
		expiry: prometheus.NewDesc("fleetd_device_cert_expiry_timestamp_seconds",
			"NotAfter of the device's current certificate (ldevid_serial or lak_serial), by profile (active devices whose fleet_identity carries it).",
			[]string{"device", "class", "profile"}, nil),
		renewal: prometheus.NewDesc("fleetd_device_cert_renewal_timestamp_seconds",
			"The time from which a boot check renews the device's current certificate, by profile.",
			[]string{"device", "class", "profile"}, nil),
		age: prometheus.NewDesc("fleetd_device_boot_check_age_seconds",
			"Seconds since the device's last accepted boot check (active devices that have had one).",
			[]string{"device", "class"}, nil),
		status: prometheus.NewDesc("fleetd_device_boot_check_status",
			"1 for the outcome of the device's last boot check: ok, drift, failed, or none (no check yet).",
			[]string{"device", "class", "outcome"}, nil),
	}
}

// observe replaces the sample with the active devices of a fresh listing.
func (c *bootCheckCollector) observe(devices []Device) {
	samples := make([]bootCheckSample, 0, len(devices))
	for _, d := range devices {
		if d.Owned.State != StateActive || d.Status == StatusDecommissioning {
			continue
		}
		outcome := d.Owned.BootCheck
		if outcome == BootCheckNone {
			outcome = "none"
		}
		sample := bootCheckSample{name: d.Name, class: d.Declared.Class, last: d.Owned.LastBootCheck, outcome: outcome}
		if c.times != nil {
			sample.ldevid, sample.lak = c.times(d)
		}
		samples = append(samples, sample)
	}
	c.mu.Lock()
	c.devices = samples
	c.mu.Unlock()
}

func (c *bootCheckCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.status
	ch <- c.expiry
	ch <- c.renewal
}

func (c *bootCheckCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.devices {
		ch <- prometheus.MustNewConstMetric(c.status, prometheus.GaugeValue, 1, s.name, s.class, string(s.outcome))
		if !s.last.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, now.Sub(s.last).Seconds(), s.name, s.class)
		}
		for _, t := range []struct {
			profile string
			times   CertTimes
		}{{"ldevid", s.ldevid}, {"lak", s.lak}} {
			if t.times.NotAfter.IsZero() {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(t.times.NotAfter.Unix()), s.name, s.class, t.profile)
			if !t.times.RenewAfter.IsZero() {
				ch <- prometheus.MustNewConstMetric(c.renewal, prometheus.GaugeValue, float64(t.times.RenewAfter.Unix()), s.name, s.class, t.profile)
			}
		}
	}
}

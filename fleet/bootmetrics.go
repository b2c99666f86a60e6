package fleet

import (
	"crypto/sha256"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of each active node (docs/design.md §5): its boot-check age and outcome and its
// current certificates' expiry and renewal point, from the device list of the last reconcile.
// Ages are computed at scrape time, so they grow between reconciles as they do in reality; a
// device leaves the metrics when it stops being an active node.
//
// Two collectors read the same samples (docs/operate.md, "Metrics and alerts"):
//
//   - nodeCollector, the per-device series, labelled with each device's name: they name the
//     fleet's machines, and their label set grows with it, so they are registered on
//     Deps.DeviceRegistry, which fleetd serves only behind the metrics token;
//   - fleetCollector, their fleet-wide counts, by class (a class of the catalogue, or "unknown")
//     and outcome or reason, on Deps.Registry: what an unauthenticated /metrics says of the
//     nodes, naming none, its series the same however many there are.

// bootCheckSamples are the active nodes of the last reconcile.
type bootCheckSamples struct {
	clock Clock
	times func(Device) (ldevid, lak CertTimes)
	class func(declared string) string // the class label of the fleet-wide counts
	// missingAfter is how old a node's last accepted check may be before it counts as missing.
	missingAfter time.Duration

	mu      sync.Mutex
	devices []bootCheckSample
	classes []string // every class label the fleet-wide counts always carry
	// certs are the last listing's certificate times by the certificates they were read from: a
	// listing parses only a certificate it has not seen (a renewal's), not two per node at every
	// reconcile pass (at 10,000 nodes, about half a second of CPU a pass).
	certs map[certKey][2]CertTimes
}

// certKey names the certificates certTimes reads of a device: each current leaf's DER digest
// and serial.
type certKey struct {
	ldevid, lak             [sha256.Size]byte
	ldevidSerial, lakSerial string
}

func certKeyOf(d Device) certKey {
	k := certKey{ldevidSerial: d.Owned.LDevIDSerial, lakSerial: d.Owned.LAKSerial}
	if c := d.Owned.Identity.LDevID.Chain; len(c) > 0 {
		k.ldevid = sha256.Sum256(c[0])
	}
	if c := d.Owned.Identity.LAK.Chain; len(c) > 0 {
		k.lak = sha256.Sum256(c[0])
	}
	return k
}

type bootCheckSample struct {
	name, class string // the declared class
	countClass  string // the class label of the fleet-wide counts
	last        time.Time
	outcome     BootCheck
	ldevid, lak CertTimes
}

// observe replaces the samples with the active devices of a fresh listing.
func (s *bootCheckSamples) observe(devices []Device) {
	s.mu.Lock()
	seen := s.certs
	s.mu.Unlock()
	certs := make(map[certKey][2]CertTimes, len(seen))
	samples := make([]bootCheckSample, 0, len(devices))
	for _, d := range devices {
		if !d.Owned.State.Running() || d.Status == StatusDecommissioning {
			continue
		}
		outcome := d.Owned.BootCheck
		if outcome == BootCheckNone {
			outcome = "none"
		}
		sample := bootCheckSample{name: d.Name, class: d.Declared.Class, countClass: d.Declared.Class, last: d.Owned.LastBootCheck, outcome: outcome}
		if s.class != nil {
			sample.countClass = s.class(d.Declared.Class)
		}
		if s.times != nil {
			k := certKeyOf(d)
			t, ok := seen[k]
			if !ok {
				t[0], t[1] = s.times(d)
			}
			certs[k] = t
			sample.ldevid, sample.lak = t[0], t[1]
		}
		samples = append(samples, sample)
	}
	s.mu.Lock()
	s.devices, s.certs = samples, certs
	s.mu.Unlock()
}

// nodeCollector exports the per-device series.
type nodeCollector struct {
	s       *bootCheckSamples
	age     *prometheus.Desc
	status  *prometheus.Desc
	expiry  *prometheus.Desc
	renewal *prometheus.Desc
}

func newNodeCollector(s *bootCheckSamples) *nodeCollector {
	return &nodeCollector{s: s,
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

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.status
	ch <- c.expiry
	ch <- c.renewal
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.clock.Now()
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, s := range c.s.devices {
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

// The reasons fleetd_nodes_attention counts a node for.
const (
	AttentionBootCheckMissing = "boot_check_missing" // its last accepted check is older than boot_check.missing_after
	AttentionCertNotRenewed   = "cert_not_renewed"   // a current certificate is past its renewal point
	AttentionCertExpiring     = "cert_expiring"      // a current certificate is in the last quarter between its renewal point and NotAfter
)

// fleetCollector exports the fleet-wide counts of the same samples.
type fleetCollector struct {
	s         *bootCheckSamples
	nodes     *prometheus.Desc
	attention *prometheus.Desc
}

func newFleetCollector(s *bootCheckSamples) *fleetCollector {
	return &fleetCollector{s: s,
		nodes: prometheus.NewDesc("fleetd_active_nodes",
			"Active nodes by class and the outcome of their last boot check (ok, drift, failed, none: no check yet), as the last reconcile listed them.",
			[]string{"class", "boot_check"}, nil),
		attention: prometheus.NewDesc("fleetd_nodes_attention",
			"Active nodes that need attention, by class and reason: boot_check_missing (no accepted boot check for boot_check.missing_after), cert_not_renewed (a current certificate past its renewal point), cert_expiring (in the last quarter between its renewal point and NotAfter). The per-device series behind the metrics token name them.",
			[]string{"class", "reason"}, nil),
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.attention
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ class, value string }
	now := c.s.clock.Now()
	nodes, attention := map[key]int{}, map[key]int{}
	c.s.mu.Lock()
	classes := c.s.classes
	for _, s := range c.s.devices {
		nodes[key{s.countClass, string(s.outcome)}]++
		if !s.last.IsZero() && now.Sub(s.last) > c.s.missingAfter {
			attention[key{s.countClass, AttentionBootCheckMissing}]++
		}
		var past, expiring bool
		for _, t := range []CertTimes{s.ldevid, s.lak} {
			if t.NotAfter.IsZero() || t.RenewAfter.IsZero() {
				continue
			}
			past = past || !now.Before(t.RenewAfter)
			expiring = expiring || t.NotAfter.Sub(now) < t.NotAfter.Sub(t.RenewAfter)/4 // inventory's cert_expiring rule
		}
		if past {
			attention[key{s.countClass, AttentionCertNotRenewed}]++
		}
		if expiring {
			attention[key{s.countClass, AttentionCertExpiring}]++
		}
		if !slices.Contains(classes, s.countClass) {
			classes = append(classes[:len(classes):len(classes)], s.countClass)
		}
	}
	c.s.mu.Unlock()
	for _, class := range classes { // every class's series, at 0 when no node counts
		for _, o := range []BootCheck{BootCheckOK, BootCheckDrift, BootCheckFailed, "none"} {
			ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(nodes[key{class, string(o)}]), class, string(o))
		}
		for _, r := range []string{AttentionBootCheckMissing, AttentionCertNotRenewed, AttentionCertExpiring} {
			ch <- prometheus.MustNewConstMetric(c.attention, prometheus.GaugeValue, float64(attention[key{class, r}]), class, r)
		}
	}
}

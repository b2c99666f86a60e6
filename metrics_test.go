package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"
	"k8s.io/client-go/rest"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/kea"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/webhook"
	"github.com/folly-infra/fleetd/workflows"
)

// recorder remembers the name of every metric registered through it, and its variable labels.
type recorder struct {
	prometheus.Registerer
	names map[string]bool
	// labels are each metric's variable labels, as its Desc lists them.
	labels map[string]string
}

var (
	fqName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
			if l := descLabels.FindStringSubmatch(d.String()); l != nil && r.labels != nil {
				r.labels[m[1]] = l[1]
			}
		}
	}
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// registeredMetrics builds every part that wire() builds, on one registry, and returns the
// names of the metrics they register (the per-device series among them).
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	public, devices := registries(t)
	for n := range devices.names {
		public.names[n] = true
	}
	return public.names
}

// registries builds every part that wire() builds on the registries wire() gives them: the one
// /metrics serves to anyone, and the per-device one behind the metrics token.
func registries(t *testing.T) (public, devices *recorder) {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry(), names: map[string]bool{}, labels: map[string]string{}}
	devices = &recorder{Registerer: prometheus.NewRegistry(), names: map[string]bool{}, labels: map[string]string{}}
	log := zerolog.Nop()
	nb, err := netbox.New(netbox.Config{URL: "http://netbox.invalid", Token: "t", Logger: log, Registry: rec})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := workflows.New(workflows.Config{RESTConfig: &rest.Config{Host: "https://k8s.invalid"}, Namespace: "tink-system", Logger: log, Registry: rec})
	if err != nil {
		t.Fatal(err)
	}
	clock := fleet.SystemClock{}
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: nb, Installer: inst,
		Clock: clock, Random: strings.NewReader(""), Logger: log, Registry: rec, DeviceRegistry: devices})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc.Requests, Logger: log, Registry: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := kea.NewWriter(kea.Config{Path: "/tmp/r.json", Logger: log, Registry: rec}); err != nil {
		t.Fatal(err)
	}
	newDependencyGauge(rec)
	return rec, devices
}

// TestPublicMetricsNameNoDevice: nothing registered on the registry /metrics serves to anyone has
// a label that names a device, and the per-device series are on the registry behind the metrics
// token (docs/operate.md, "Metrics and alerts"). Before, wire's one registry held
// fleetd_device_boot_check_status{device,…} and the others, served to anyone (finding 8).
func TestPublicMetricsNameNoDevice(t *testing.T) {
	public, devices := registries(t)
	for name, labels := range public.labels {
		for _, l := range strings.Split(labels, ",") {
			if l == "device" || l == "name" || l == "serial" {
				t.Errorf("%s, served to anyone, is labelled %s", name, l)
			}
		}
	}
	for _, name := range []string{"fleetd_device_boot_check_age_seconds", "fleetd_device_boot_check_status",
		"fleetd_device_cert_expiry_timestamp_seconds", "fleetd_device_cert_renewal_timestamp_seconds"} {
		if !devices.names[name] || public.names[name] {
			t.Errorf("%s: behind the metrics token %v, served to anyone %v; want behind the token only", name, devices.names[name], public.names[name])
		}
	}
}

var metricName = regexp.MustCompile(`\bfleetd_[a-z0-9_]+`)

// TestAlertRulesNameRegisteredMetrics: every metric an alert expression names is one fleetd
// registers, so a renamed metric cannot silently disable an alert.
func TestAlertRulesNameRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	raw, err := os.ReadFile("examples/monitoring/fleetd-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				n++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !registered[m] && !registered[base] {
					t.Errorf("alert %s names %s, which fleetd does not register", r.Alert, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no fleetd_ metric found in the alert rules")
	}
}

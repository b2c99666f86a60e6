// Package monitoring holds the example Prometheus alert rules; its test runs promtool on them.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRules checks the rules and runs their unit tests with the real promtool (Debian
// prometheus). The metric names are checked against what fleetd registers in main's tests.
func TestRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (Debian package prometheus; make test installs it): %v", err)
	}
	for _, args := range [][]string{
		{"check", "rules", "fleetd-rules.yaml"},
		{"test", "rules", "fleetd-rules.test.yaml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
	checkScrapeConfig(t, promtool)
}

// checkScrapeConfig runs promtool check config on prometheus.yml, whose files (the metrics token,
// fleetd's CA), which promtool requires to exist, are made in a directory of the test's.
func checkScrapeConfig(t *testing.T, promtool string) {
	raw, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"fleetd-metrics-token", "fleetd-ca.pem"} {
		if !strings.Contains(string(raw), "/etc/prometheus/"+f) {
			t.Errorf("prometheus.yml does not name /etc/prometheus/%s", f)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := os.ReadFile("fleetd-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fleetd-rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(string(raw), "/etc/prometheus/", dir+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput(); err != nil {
		t.Errorf("promtool check config prometheus.yml: %v\n%s", err, out)
	}
}

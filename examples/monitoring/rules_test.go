// Package monitoring holds the example Prometheus alert rules; its test runs promtool on them.
package monitoring

import (
	"os/exec"
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
}

package agent

import (
	"io"
	"strings"
	"testing"
)

// TestParseEnrollArgs checks that flags default to the Template's environment and that the
// configuration is validated as a whole.
func TestParseEnrollArgs(t *testing.T) {
	env := map[string]string{"FLEETD_URL": "https://spore.lan:8443/", "FLEETD_DEVICE": "node-a", "FLEETD_REQUEST": "provision-k3f9x2mq", "FLEETD_TPM": "swtpm:127.0.0.1:2321"}
	cfg, err := ParseEnrollArgs([]string{"--retries", "0"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FleetdURL != "https://spore.lan:8443" || cfg.Device != "node-a" || cfg.Request != "provision-k3f9x2mq" || cfg.TPM != "swtpm:127.0.0.1:2321" ||
		cfg.Retries != 0 || cfg.WorkflowDir != "/workflow" || cfg.EventLog != "/sys/kernel/security/tpm0/binary_bios_measurements" {
		t.Errorf("config = %+v", cfg)
	}
	_, err = EnrollConfig{Conn: Conn{FleetdURL: "spore:8443"}}.withDefaults()
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "not an http(s) URL") || !strings.Contains(err.Error(), "no device name") ||
		!strings.Contains(err.Error(), "no request id") {
		t.Errorf("err = %v, want a usage error listing the three problems", err)
	}
	if _, err := ParseEnrollArgs([]string{"extra"}, func(string) string { return "" }, io.Discard); ExitCode(err) != ExitUsage {
		t.Errorf("extra argument: err = %v, want a usage error", err)
	}
}

package deploy

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildFleetd builds fleetd from the repository root into a temporary directory and returns its
// path. It keeps the test's own build settings (cgo as the tests have it, unlike `make build`),
// so that it reuses the packages the tests compiled; no flag depends on cgo.
func buildFleetd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fleetd: %v\n%s", err, out)
	}
	return bin
}

// TestDeployFlagsExist asks the binary itself for the flags the deploy files pass, so that a
// renamed flag fails here rather than on spore or a node.
func TestDeployFlagsExist(t *testing.T) {
	fleetd := buildFleetd(t)
	for _, tc := range []struct {
		cmd   string
		flags []string
		where string
	}{
		{cmd: "serve", flags: []string{"--config", "--listen-http", "--listen-https"}, where: "deploy/systemd/fleetd.service and deploy/nixos/fleetd.nix (services.fleetd.listen.http/https)"},
		{cmd: "boot-check", flags: bootCheckArgs[1:], where: "every boot check file in deploy/ (bootCheckArgs)"},
		{cmd: "boot-check", flags: []string{"--install-only", "--dir"}, where: "deploy/kubernetes/spire-agent-daemonset.yaml"},
		{cmd: "enroll", flags: []string{"--tpm", "--workflow-dir", "--ca-file"}, where: "deploy/README.md"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			// -h exits non-zero (flag.ErrHelp); only a binary that did not run is an error here.
			out, err := exec.Command(fleetd, tc.cmd, "-h").CombinedOutput()
			if _, exited := errors.AsType[*exec.ExitError](err); err != nil && !exited {
				t.Fatalf("fleetd %s -h: %v", tc.cmd, err)
			}
			usage := string(out)
			for _, f := range tc.flags {
				if !strings.HasPrefix(f, "--") {
					continue
				}
				name := strings.TrimPrefix(f, "--")
				if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `\b`).MatchString(usage) {
					t.Errorf("fleetd %s has no flag -%s, which %s pass; its usage:\n%s", tc.cmd, name, tc.where, usage)
				}
			}
		})
	}
}

package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestDeployFlagsExist asks the binary itself for the flags the deploy files pass, so that a
// renamed flag fails here rather than on spore or a node.
func TestDeployFlagsExist(t *testing.T) {
	for _, tc := range []struct {
		cmd   string
		flags []string
		where string
	}{
		{cmd: "serve", flags: []string{"--config", "--listen-http", "--listen-https"}, where: "deploy/systemd/fleetd.service and deploy/nixos/fleetd.nix (services.fleetd.listen.http/https)"},
		{cmd: "boot-check", flags: bootCheckArgs[1:], where: "every boot check file in deploy/ (bootCheckArgs)"},
		{cmd: "enroll", flags: []string{"--tpm", "--workflow-dir", "--ca-file"}, where: "deploy/README.md"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			run([]string{tc.cmd, "-h"}, &stdout, &stderr)
			usage := stdout.String() + stderr.String()
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

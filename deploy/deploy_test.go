package deploy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The boot check's command line, as every deploy file for a node writes it (docs/boot-checks.md, "`fleetd boot-check`").
var bootCheckArgs = []string{"boot-check", "--url", "https://spore.lan:8443", "--tpm", "/dev/tpmrm0", "--dir", "/var/lib/fleetd-node"}

// unit is a systemd unit file: section → key → every assignment in order.
type unit map[string]map[string][]string

func parseUnit(text string) (unit, error) {
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("line %d: %q is neither a section nor key=value in one", n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	return u, nil
}

// value is what a key amounts to: the assignments joined by spaces (list settings accumulate;
// NixOS writes one line per list element), booleans spelled yes/no.
func (u unit) value(section, key string) (string, bool) {
	vals, ok := u[section][key]
	if !ok {
		return "", false
	}
	v := strings.Join(vals, " ")
	switch strings.ToLower(v) {
	case "true", "on", "1":
		v = "yes"
	case "false", "off", "0":
		v = "no"
	}
	return v, true
}

// directive is a requirement on a unit: key must amount to want, or be absent when absent is set.
type directive struct {
	section, key, want string
	absent             bool
}

// hardened is what every fleetd service unit keeps from the host (systemd.exec(5)).
var hardened = []directive{
	{section: "Service", key: "NoNewPrivileges", want: "yes"},
	{section: "Service", key: "CapabilityBoundingSet", want: ""},
	{section: "Service", key: "AmbientCapabilities", want: ""},
	{section: "Service", key: "ProtectSystem", want: "strict"},
	{section: "Service", key: "ProtectHome", want: "yes"},
	{section: "Service", key: "PrivateTmp", want: "yes"},
	{section: "Service", key: "ProtectKernelTunables", want: "yes"},
	{section: "Service", key: "ProtectKernelModules", want: "yes"},
	{section: "Service", key: "ProtectControlGroups", want: "yes"},
	{section: "Service", key: "RestrictAddressFamilies", want: "AF_INET AF_INET6 AF_UNIX"},
	{section: "Service", key: "RestrictSUIDSGID", want: "yes"},
	{section: "Service", key: "RestrictNamespaces", want: "yes"},
	{section: "Service", key: "SystemCallFilter", want: "@system-service ~@privileged"},
	{section: "Service", key: "SystemCallArchitectures", want: "native"},
	{section: "Service", key: "MemoryDenyWriteExecute", want: "yes"},
	{section: "Service", key: "LockPersonality", want: "yes"},
}

// serviceRules: the service on spore writes only the Kea reservations directory and sees no device.
var serviceRules = append([]directive{
	{section: "Service", key: "User", want: "fleetd"},
	{section: "Service", key: "Environment", want: "GOMEMLIMIT=96MiB"},
	{section: "Service", key: "ReadWritePaths", want: "/var/lib/kea/fleet"},
	{section: "Service", key: "PrivateDevices", want: "yes"},
	{section: "Service", key: "DevicePolicy", want: "closed"},
	{section: "Service", key: "DeviceAllow", absent: true},
}, hardened...)

// bootCheckRules: the node's check reaches the TPM and nothing else, and writes only the node
// directory, where it installs renewed certificates.
var bootCheckRules = append([]directive{
	{section: "Service", key: "Type", want: "oneshot"},
	{section: "Service", key: "DevicePolicy", want: "closed"},
	{section: "Service", key: "DeviceAllow", want: "/dev/tpmrm0 rw"},
	{section: "Service", key: "PrivateDevices", absent: true}, // it would hide /dev/tpmrm0
	{section: "Service", key: "ReadWritePaths", want: "/var/lib/fleetd-node"},
}, hardened...)

func checkDirectives(u unit, rules []directive) []string {
	var bad []string
	for _, d := range rules {
		got, ok := u.value(d.section, d.key)
		switch {
		case d.absent && ok:
			bad = append(bad, fmt.Sprintf("[%s] %s=%s is set; it must not be", d.section, d.key, got))
		case !d.absent && !ok:
			bad = append(bad, fmt.Sprintf("[%s] %s is missing; want %s=%s", d.section, d.key, d.key, d.want))
		case !d.absent && got != d.want:
			bad = append(bad, fmt.Sprintf("[%s] %s=%s, want %s=%s", d.section, d.key, got, d.key, d.want))
		}
	}
	return bad
}

// execArgs is ExecStart split into words, the binary dropped.
func execArgs(u unit) []string {
	v, _ := u.value("Service", "ExecStart")
	f := strings.Fields(v)
	if len(f) == 0 {
		return nil
	}
	return f[1:]
}

// verifyUnits runs systemd-analyze verify over the unit files in dir and returns every line it
// printed: systemd only warns about unknown keys and bad values, so any output is a finding.
func verifyUnits(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.*"))
	out, err := exec.Command("systemd-analyze", append([]string{"verify"}, files...)...).CombinedOutput()
	lines := nonEmptyLines(string(out))
	if err != nil {
		lines = append(lines, "systemd-analyze verify: "+err.Error())
	}
	return lines
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// exposure is systemd-analyze security's score for a unit file (0 = fully confined, 10 = none).
func exposure(t *testing.T, path string) float64 {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", path).CombinedOutput()
	m := exposureRE.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security --offline=yes %s: %v\n%s", path, err, out)
	}
	f, _ := strconv.ParseFloat(string(m[1]), 64)
	return f
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func needSystemdAnalyze(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is missing (Debian: systemd): run `make deps`, which installs it")
	}
}

// stageUnits copies the shipped units into a temporary directory with /usr/local/bin/fleetd
// replaced by an executable stub, since verify refuses an ExecStart binary that does not exist.
func stageUnits(t *testing.T, texts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	stub := filepath.Join(dir, "bin", "fleetd")
	if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range texts {
		text = strings.ReplaceAll(text, "/usr/local/bin/fleetd", stub)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// stderrOf is what a command that exited non-zero printed on stderr (exec.Cmd.Output keeps it).
func stderrOf(err error) []byte {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.Stderr
	}
	return nil
}

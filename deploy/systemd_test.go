package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const systemdDir = "systemd"

// TestSystemdUnits checks the plain units as shipped: the hardening each must keep, the command
// lines, the timer, systemd's own parser, and systemd's exposure score.
func TestSystemdUnits(t *testing.T) {
	texts := map[string]string{}
	for _, name := range []string{"fleetd.service", "fleetd-boot-check.service", "fleetd-boot-check.timer"} {
		texts[name] = readFile(t, filepath.Join(systemdDir, name))
	}
	units := map[string]unit{}
	for name, text := range texts {
		u, err := parseUnit(text)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		units[name] = u
	}

	for name, rules := range map[string][]directive{"fleetd.service": serviceRules, "fleetd-boot-check.service": bootCheckRules} {
		if bad := checkDirectives(units[name], rules); len(bad) > 0 {
			t.Errorf("%s:\n  %s", name, strings.Join(bad, "\n  "))
		}
	}
	if got := execArgs(units["fleetd.service"]); !slices.Equal(got, []string{"serve", "--config", "/etc/fleetd/fleetd.yaml"}) {
		t.Errorf("fleetd.service runs fleetd %q, want serve --config /etc/fleetd/fleetd.yaml", got)
	}
	if got := execArgs(units["fleetd-boot-check.service"]); !slices.Equal(got, bootCheckArgs) {
		t.Errorf("fleetd-boot-check.service runs fleetd %q, want %q", got, bootCheckArgs)
	}
	for _, cred := range units["fleetd.service"]["Service"]["LoadCredential"] {
		name, path, _ := strings.Cut(cred, ":")
		if path != "/etc/fleetd/secrets/"+name {
			t.Errorf("fleetd.service: LoadCredential=%s: want the file /etc/fleetd/secrets/%s", cred, name)
		}
	}
	timer := units["fleetd-boot-check.timer"]
	for k, want := range map[string]string{"OnCalendar": "hourly", "OnBootSec": "2min", "Persistent": "yes"} {
		if got, _ := timer.value("Timer", k); got != want {
			t.Errorf("fleetd-boot-check.timer: %s=%q, want %q", k, got, want)
		}
	}
	if got, ok := timer.value("Timer", "Unit"); ok {
		t.Errorf("fleetd-boot-check.timer names Unit=%s; it must start fleetd-boot-check.service (the default)", got)
	}

	needSystemdAnalyze(t)
	dir := stageUnits(t, texts)
	if out := verifyUnits(t, dir); len(out) > 0 {
		t.Errorf("systemd-analyze verify:\n  %s", strings.Join(out, "\n  "))
	}
	for name, max := range map[string]float64{"fleetd.service": 2.0, "fleetd-boot-check.service": 2.5} {
		got := exposure(t, filepath.Join(dir, name))
		t.Logf("%s: systemd-analyze security exposure %.1f", name, got)
		if got > max {
			t.Errorf("%s: systemd-analyze security exposure %.1f, want at most %.1f", name, got, max)
		}
	}
}

// TestSystemdUnitChecksRefuse breaks the shipped service unit in the ways the checks above must
// notice, so that they can fail.
func TestSystemdUnitChecksRefuse(t *testing.T) {
	base := readFile(t, filepath.Join(systemdDir, "fleetd.service"))
	drop := func(line string) string {
		if !strings.Contains(base, line+"\n") {
			t.Fatalf("fleetd.service has no line %q to drop", line)
		}
		return strings.Replace(base, line+"\n", "", 1)
	}
	add := func(line string) string { return strings.Replace(base, "[Service]\n", "[Service]\n"+line+"\n", 1) }
	for _, tc := range []struct {
		name, text string
		want       string // a substring of the directive finding; "" for none
		verify     string // a substring of systemd-analyze verify's output; "" for none
	}{
		{name: "ok/as-shipped", text: base},
		{name: "refuse/new-privileges", text: drop("NoNewPrivileges=yes"), want: "NoNewPrivileges is missing"},
		{name: "refuse/capability", text: strings.Replace(base, "CapabilityBoundingSet=\n", "CapabilityBoundingSet=CAP_NET_ADMIN\n", 1), want: "CapabilityBoundingSet=CAP_NET_ADMIN"},
		{name: "refuse/writable-etc", text: add("ReadWritePaths=/etc"), want: "ReadWritePaths=/etc /var/lib/kea/fleet"},
		{name: "refuse/root", text: strings.Replace(base, "User=fleetd\n", "User=root\n", 1), want: "User=root"},
		{name: "refuse/misspelt-key", text: add("ProtectSystm=strict"), verify: "Unknown key"},
		{name: "refuse/bad-value", text: add("ProtectHome=stricter"), want: "ProtectHome=stricter yes", verify: "protect home value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := parseUnit(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			bad := strings.Join(checkDirectives(u, serviceRules), "\n")
			if (tc.want == "") != (bad == "") || !strings.Contains(bad, tc.want) {
				t.Errorf("directive findings:\n%s\nwant one containing %q", bad, tc.want)
			}
			needSystemdAnalyze(t)
			out := strings.Join(verifyUnits(t, stageUnits(t, map[string]string{"fleetd.service": tc.text})), "\n")
			if (tc.verify == "") != (out == "") || !strings.Contains(out, tc.verify) {
				t.Errorf("systemd-analyze verify said:\n%s\nwant output containing %q", out, tc.verify)
			}
		})
	}
}

// TestAlpinePeriodicScript checks the boot check for Alpine nodes: busybox run-parts skips names
// with a dot and files that are not executable, so both would silently disable it.
func TestAlpinePeriodicScript(t *testing.T) {
	const path = "alpine/fleetd-boot-check"
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 == 0 || strings.Contains(filepath.Base(path), ".") {
		t.Errorf("%s: mode %v: run-parts runs only executable files without a dot in the name", path, fi.Mode())
	}
	if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
		t.Errorf("sh -n %s: %v\n%s", path, err, out)
	}
	want := "/usr/local/bin/fleetd " + strings.Join(bootCheckArgs, " ")
	if !strings.Contains(readFile(t, path), want) {
		t.Errorf("%s does not run %q", path, want)
	}
}

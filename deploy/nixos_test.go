package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const nixosDir = "nixos"

func needNix(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nix-instantiate"); err != nil {
		t.Fatal("nix-instantiate is missing (Debian: nix-bin): run `make deps`, which installs it")
	}
}

// parseNix runs nix-instantiate --parse on a file; nix prints warnings about its build users
// group on machines without one, so only the exit status counts.
func parseNix(path string) error {
	out, err := exec.Command("nix-instantiate", "--parse", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nix-instantiate --parse %s: %w\n%s", path, err, out)
	}
	return nil
}

func TestNixOSFilesParse(t *testing.T) {
	needNix(t)
	files, _ := filepath.Glob(filepath.Join(nixosDir, "*.nix"))
	more, _ := filepath.Glob(filepath.Join(nixosDir, "testdata", "*.nix"))
	files = append(files, more...)
	if !slices.Contains(files, filepath.Join(nixosDir, "fleetd.nix")) {
		t.Fatalf("%s/fleetd.nix is missing (found %v)", nixosDir, files)
	}
	for _, f := range files {
		if err := parseNix(f); err != nil {
			t.Error(err)
		}
	}
	// The check can fail: the module with its last brace cut off does not parse.
	src := readFile(t, filepath.Join(nixosDir, "fleetd.nix"))
	broken := filepath.Join(t.TempDir(), "broken.nix")
	if err := os.WriteFile(broken, []byte(src[:strings.LastIndex(src, "}")]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := parseNix(broken); err == nil {
		t.Error("nix-instantiate --parse accepted the module without its last brace")
	}
}

// nixosConfig is the part of the module's config output the tests read.
type nixosConfig struct {
	Assertions []struct {
		Assertion bool
		Message   string
	} `json:"assertions"`
	Networking struct {
		Firewall struct {
			AllowedTCPPorts []int `json:"allowedTCPPorts"`
		} `json:"firewall"`
	} `json:"networking"`
	Systemd struct {
		Services map[string]nixosUnit `json:"services"`
		Timers   map[string]nixosUnit `json:"timers"`
		Paths    map[string]nixosUnit `json:"paths"`
		Tmpfiles struct {
			Rules []string `json:"rules"`
		} `json:"tmpfiles"`
	} `json:"systemd"`
	Users struct {
		Users map[string]struct {
			IsSystemUser bool   `json:"isSystemUser"`
			Group        string `json:"group"`
		} `json:"users"`
	} `json:"users"`
}

type nixosUnit struct {
	Description   string         `json:"description"`
	Wants         []string       `json:"wants"`
	After         []string       `json:"after"`
	WantedBy      []string       `json:"wantedBy"`
	Path          []string       `json:"path"`
	UnitConfig    map[string]any `json:"unitConfig"`
	ServiceConfig map[string]any `json:"serviceConfig"`
	TimerConfig   map[string]any `json:"timerConfig"`
	PathConfig    map[string]any `json:"pathConfig"`
}

// render writes a NixOS unit the way NixOS does: lists as one line per element, booleans as
// true/false, the empty string as an empty assignment.
func (n nixosUnit) render(kind string) string {
	var b strings.Builder
	line := func(k string, v any) {
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				fmt.Fprintf(&b, "%s=%v\n", k, e)
			}
		default:
			fmt.Fprintf(&b, "%s=%v\n", k, v)
		}
	}
	section := func(name string, m map[string]any) {
		fmt.Fprintf(&b, "[%s]\n", name)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			line(k, m[k])
		}
	}
	unitSection := map[string]any{"Description": n.Description}
	for k, v := range map[string][]string{"Wants": n.Wants, "After": n.After} {
		if len(v) > 0 {
			unitSection[k] = strings.Join(v, " ")
		}
	}
	for k, v := range n.UnitConfig {
		unitSection[k] = v
	}
	section("Unit", unitSection)
	if kind == "service" {
		section("Service", n.ServiceConfig)
	} else {
		section("Timer", n.TimerConfig)
	}
	if len(n.WantedBy) > 0 {
		section("Install", map[string]any{"WantedBy": strings.Join(n.WantedBy, " ")})
	}
	return b.String()
}

// TestNixOSModule evaluates the module for spore and for a node and checks the units it makes
// against the same rules as the plain units, then with systemd's own parser.
func TestNixOSModule(t *testing.T) {
	needNix(t)
	pkg := nixPackage(stageUnits(t, nil)) // a package whose bin/fleetd exists, for systemd-analyze verify
	spore := func(extra map[string]any) map[string]map[string]any { return sporeValues(pkg, extra) }
	for _, tc := range []struct {
		name   string
		values map[string]map[string]any
		check  func(t *testing.T, c nixosConfig)
	}{
		{name: "ok/spore", values: spore(nil), check: func(t *testing.T, c nixosConfig) {
			u := nixosService(t, c, "fleetd", serviceRules)
			want := []any{"ldevid-ca-key:/var/lib/secrets/fleetd/ldevid-ca.key", "netbox-token:/var/lib/secrets/fleetd/netbox-token"}
			got := c.Systemd.Services["fleetd"].ServiceConfig
			if !slices.Equal(execArgs(u), []string{"serve", "--config", "/etc/fleetd/fleetd.yaml"}) ||
				!slices.Equal(anys(got["LoadCredential"]), want) || got["SocketBindAllow"] != nil {
				t.Errorf("ExecStart %v, LoadCredential %v, SocketBindAllow %v; want no --listen, credentials %v, no SocketBindAllow",
					got["ExecStart"], got["LoadCredential"], got["SocketBindAllow"], want)
			}
			if !slices.Equal(c.Systemd.Tmpfiles.Rules, []string{"d /var/lib/kea/fleet 0755 fleetd kea - -"}) ||
				!c.Users.Users["fleetd"].IsSystemUser || len(c.Networking.Firewall.AllowedTCPPorts) != 0 {
				t.Errorf("tmpfiles %q, user %+v, firewall %v", c.Systemd.Tmpfiles.Rules, c.Users.Users["fleetd"], c.Networking.Firewall.AllowedTCPPorts)
			}
			if _, ok := c.Systemd.Services["fleetd-boot-check"]; ok {
				t.Error("the boot check is on although services.fleetd-boot-check.enable is false")
			}
			if p := c.Systemd.Services["fleetd"].Path; len(p) != 1 || !strings.HasSuffix(p[0], "-cloud-init-24.1.4") {
				t.Errorf("fleetd's unit path %q, want cloud-init (fleetd validates the cloud-init classes with it)", p)
			}
			verifyNixOS(t, c, 2.0)
		}},
		{name: "ok/listen", values: spore(map[string]any{"listen": map[string]string{"http": "127.0.0.1:8080", "https": "[::]:8443"}, "openFirewall": true}),
			check: func(t *testing.T, c nixosConfig) {
				got := c.Systemd.Services["fleetd"].ServiceConfig
				if !strings.HasSuffix(got["ExecStart"].(string), " --listen-http 127.0.0.1:8080 --listen-https '[::]:8443'") ||
					!slices.Equal(anys(got["SocketBindAllow"]), []any{"tcp:8080", "tcp:8443"}) || got["SocketBindDeny"] != "any" ||
					!slices.Equal(c.Networking.Firewall.AllowedTCPPorts, []int{8080, 8443}) {
					t.Errorf("ExecStart %v, SocketBind %v/%v, firewall %v; want both listen flags, tcp:8080 tcp:8443/any, [8080 8443]",
						got["ExecStart"], got["SocketBindAllow"], got["SocketBindDeny"], c.Networking.Firewall.AllowedTCPPorts)
				}
				verifyNixOS(t, c, 2.0)
			}},
		{name: "ok/listen-unrestricted", values: spore(map[string]any{"listen": map[string]string{"https": ":8443"}, "restrictBind": false}),
			check: func(t *testing.T, c nixosConfig) {
				got := c.Systemd.Services["fleetd"].ServiceConfig
				if !strings.HasSuffix(got["ExecStart"].(string), " --listen-https :8443") || got["SocketBindAllow"] != nil || got["SocketBindDeny"] != nil {
					t.Errorf("ExecStart %v, SocketBind %v/%v; want --listen-https :8443 and no bind restriction", got["ExecStart"], got["SocketBindAllow"], got["SocketBindDeny"])
				}
			}},
		{name: "ok/no-cloud-init", values: spore(map[string]any{"cloudInitPackage": nil}),
			check: func(t *testing.T, c nixosConfig) {
				if p := c.Systemd.Services["fleetd"].Path; len(p) != 0 {
					t.Errorf("fleetd's unit path %q with cloudInitPackage null, want none", p)
				}
			}},
		{name: "ok/kea-elsewhere", values: spore(map[string]any{"keaReservationsDir": "/srv/kea/fleet", "keaGroup": "_kea", "extraGroups": []string{"adm"}}),
			check: func(t *testing.T, c nixosConfig) {
				got := c.Systemd.Services["fleetd"].ServiceConfig
				if !slices.Equal(anys(got["ReadWritePaths"]), []any{"/srv/kea/fleet"}) || !slices.Equal(anys(got["SupplementaryGroups"]), []any{"_kea", "adm"}) ||
					!slices.Equal(c.Systemd.Tmpfiles.Rules, []string{"d /srv/kea/fleet 0755 fleetd _kea - -"}) {
					t.Errorf("ReadWritePaths %v, SupplementaryGroups %v, tmpfiles %q", got["ReadWritePaths"], got["SupplementaryGroups"], c.Systemd.Tmpfiles.Rules)
				}
			}},
		{name: "ok/node", values: map[string]map[string]any{"fleetd-boot-check": {"enable": true, "package": pkg, "url": "https://spore.lan:8443"}},
			check: func(t *testing.T, c nixosConfig) {
				u := nixosService(t, c, "fleetd-boot-check", bootCheckRules)
				if got := execArgs(u); !slices.Equal(got, bootCheckArgs) {
					t.Errorf("the boot check runs fleetd %q, want %q", got, bootCheckArgs)
				}
				timer := c.Systemd.Timers["fleetd-boot-check"]
				if timer.TimerConfig["OnCalendar"] != "hourly" || timer.TimerConfig["OnBootSec"] != "2min" || !slices.Contains(timer.WantedBy, "timers.target") {
					t.Errorf("timer %+v: want hourly, 2 min after boot, wanted by timers.target", timer)
				}
				if _, ok := c.Systemd.Services["fleetd"]; ok || len(c.Users.Users) != 0 {
					t.Error("a node got the fleetd service or its user")
				}
				verifyNixOS(t, c, 2.5)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, evalNixOS(t, tc.values)) })
	}
}

// nixosService renders one evaluated service and checks it against rules.
func nixosService(t *testing.T, c nixosConfig, name string, rules []directive) unit {
	t.Helper()
	n, ok := c.Systemd.Services[name]
	if !ok {
		t.Fatalf("the module made no %s service", name)
	}
	u, err := parseUnit(n.render("service"))
	if err != nil {
		t.Fatal(err)
	}
	if bad := checkDirectives(u, rules); len(bad) > 0 {
		t.Errorf("%s.service from the NixOS module:\n  %s", name, strings.Join(bad, "\n  "))
	}
	return u
}

// verifyNixOS writes every evaluated unit as NixOS would and runs systemd's checks on them.
func verifyNixOS(t *testing.T, c nixosConfig, maxExposure float64) {
	t.Helper()
	needSystemdAnalyze(t)
	dir := t.TempDir()
	var services []string
	for kind, units := range map[string]map[string]nixosUnit{"service": c.Systemd.Services, "timer": c.Systemd.Timers} {
		for name, n := range units {
			if err := os.WriteFile(filepath.Join(dir, name+"."+kind), []byte(n.render(kind)), 0o644); err != nil {
				t.Fatal(err)
			}
			if kind == "service" {
				services = append(services, name)
			}
		}
	}
	if out := verifyUnits(t, dir); len(out) > 0 {
		t.Errorf("systemd-analyze verify of the NixOS units:\n  %s", strings.Join(out, "\n  "))
	}
	for _, name := range services {
		got := exposure(t, filepath.Join(dir, name+".service"))
		t.Logf("%s.service from the NixOS module: exposure %.1f", name, got)
		if got > maxExposure {
			t.Errorf("%s.service from the NixOS module: exposure %.1f, want at most %.1f", name, got, maxExposure)
		}
	}
}

func anys(v any) []any {
	l, _ := v.([]any)
	return l
}

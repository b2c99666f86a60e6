package deploy

import (
	"strings"
	"testing"
)

// TestNixOSModuleRefuses: the module's options refuse what NixOS would refuse, with NixOS's
// message naming the option: a value of the wrong type, a required option left out, an option
// that does not exist, a false assertion. Each row's comment is the nixpkgs behaviour it shows.
func TestNixOSModuleRefuses(t *testing.T) {
	pkg := nixPackage(t.TempDir())
	spore := func(extra map[string]any) map[string]map[string]any { return sporeValues(pkg, extra) }
	without := func(name string) map[string]map[string]any {
		v := spore(nil)
		delete(v["fleetd"], name)
		return v
	}
	node := func(extra map[string]any) map[string]map[string]any {
		v := map[string]any{"enable": true, "package": pkg, "url": "https://spore.lan:8443"}
		for k, x := range extra {
			v[k] = x
		}
		return map[string]map[string]any{"fleetd-boot-check": v}
	}
	notOfType := func(option, typ string) string {
		return "A definition for option `" + option + "' is not of type `" + typ + "'"
	}
	for _, tc := range []struct {
		name   string
		values map[string]map[string]any
		want   string
	}{
		// types.bool (mkEnableOption): true or false, not the string "yes".
		{name: "enable-string", values: spore(map[string]any{"enable": "yes"}), want: notOfType("services.fleetd.enable", "boolean")},
		{name: "openFirewall-int", values: spore(map[string]any{"openFirewall": 1}), want: notOfType("services.fleetd.openFirewall", "boolean")},
		// types.package: a derivation or a store path, not any directory.
		{name: "package-not-in-store", values: spore(map[string]any{"package": "/usr/local"}), want: notOfType("services.fleetd.package", "package")},
		// types.nullOr types.package: null or a package, not a program's path outside the store.
		{name: "cloudInitPackage-not-in-store", values: spore(map[string]any{"cloudInitPackage": "/usr/bin/cloud-init"}), want: notOfType("services.fleetd.cloudInitPackage", "null or package")},
		// types.path: an absolute path.
		{name: "configFile-relative", values: spore(map[string]any{"configFile": "etc/fleetd.yaml"}), want: notOfType("services.fleetd.configFile", "path")},
		{name: "configFile-int", values: spore(map[string]any{"configFile": 5}), want: notOfType("services.fleetd.configFile", "path")},
		// types.attrsOf types.str: an attribute set, and each value a string (checked by name).
		{name: "secretFiles-list", values: spore(map[string]any{"secretFiles": []string{"/run/token"}}), want: notOfType("services.fleetd.secretFiles", "attribute set of string")},
		{name: "secretFiles-value", values: spore(map[string]any{"secretFiles": map[string]any{"netbox-token": 5}}), want: notOfType("services.fleetd.secretFiles.netbox-token", "string")},
		// types.listOf types.str: a list, and each element a string (checked by position).
		{name: "extraGroups-string", values: spore(map[string]any{"extraGroups": "adm"}), want: notOfType("services.fleetd.extraGroups", "list of string")},
		{name: "extraGroups-element", values: spore(map[string]any{"extraGroups": []any{"adm", 4}}), want: notOfType(`services.fleetd.extraGroups."[definition 1-entry 2]"`, "string")},
		// types.nullOr types.str: null or a string, not a port number.
		{name: "listen-int", values: spore(map[string]any{"listen": map[string]any{"https": 8443}}), want: notOfType("services.fleetd.listen.https", "null or string")},
		// types.str.
		{name: "keaGroup-int", values: spore(map[string]any{"keaGroup": 0}), want: notOfType("services.fleetd.keaGroup", "string")},
		{name: "url-int", values: node(map[string]any{"url": 8443}), want: notOfType("services.fleetd-boot-check.url", "string")},
		{name: "onCalendar-bool", values: node(map[string]any{"onCalendar": true}), want: notOfType("services.fleetd-boot-check.onCalendar", "string")},
		// An option without a default must be set once the module reads it.
		{name: "no-package", values: without("package"), want: "The option `services.fleetd.package' was accessed but has no value defined"},
		{name: "no-configFile", values: without("configFile"), want: "The option `services.fleetd.configFile' was accessed but has no value defined"},
		{name: "no-url", values: node(map[string]any{"url": nil}), want: notOfType("services.fleetd-boot-check.url", "string")},
		{name: "no-url-at-all", values: map[string]map[string]any{"fleetd-boot-check": {"enable": true, "package": pkg}},
			want: "The option `services.fleetd-boot-check.url' was accessed but has no value defined"},
		// A definition for an option nobody declared fails, even in a disabled module.
		{name: "misspelt", values: spore(map[string]any{"configfile": "/etc/fleetd/fleetd.yaml"}), want: "The option `services.fleetd.configfile' does not exist"},
		{name: "misspelt-nested", values: map[string]map[string]any{"fleetd": {"listen": map[string]any{"htps": ":8443"}}}, want: "The option `services.fleetd.listen.htps' does not exist"},
		// A false assertion fails the system's evaluation with its message.
		{name: "firewall-without-listen", values: spore(map[string]any{"openFirewall": true}),
			want: "Failed assertions:\n- services.fleetd.openFirewall needs services.fleetd.listen.http or .https"},
	} {
		t.Run("refuse/"+tc.name, func(t *testing.T) { wantNixError(t, "", tc.values, tc.want) })
	}
}

// TestNixOSModuleLaziness: as in NixOS, an option nothing reads needs no value, and a package
// may be given as a store path.
func TestNixOSModuleLaziness(t *testing.T) {
	// services.fleetd.package and .configFile have no default; a disabled module never reads them.
	c := evalNixOS(t, map[string]map[string]any{"fleetd": {"enable": false}})
	if len(c.Systemd.Services) != 0 || len(c.Users.Users) != 0 {
		t.Errorf("a disabled module made services %v, users %v", c.Systemd.Services, c.Users.Users)
	}
	// types.package turns a store-path string into a derivation (lib.toDerivation).
	const storePath = "/nix/store/0c2jd4ljx4wg3yk0g4fbbs1m4dpiaxfx-fleetd-0.1.0"
	c = evalNixOS(t, sporeValues(storePath, nil))
	if got, _ := c.Systemd.Services["fleetd"].ServiceConfig["ExecStart"].(string); !strings.HasPrefix(got, storePath+"/bin/fleetd serve ") {
		t.Errorf("ExecStart %q, want %s/bin/fleetd serve ...", got, storePath)
	}
}

package deploy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nixEval evaluates a NixOS module with deploy/nixos/testdata/eval.nix (the module system over
// the project's stand-in for nixpkgs' lib, testdata/lib.nix) and the given option values
// (services.<name>.<option>). module "" is deploy/nixos/fleetd.nix. It returns the evaluated
// config as JSON, or the evaluator's error message.
func nixEval(t *testing.T, module string, values any) ([]byte, error) {
	t.Helper()
	needNix(t)
	js, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--eval", "--strict", "--json", "--readonly-mode", "--option", "build-users-group", "",
		"--argstr", "values", string(js)}
	if module != "" {
		args = append(args, "--arg", "module", module)
	}
	cmd := exec.Command("nix-instantiate", append(args, filepath.Join(nixosDir, "testdata", "eval.nix"))...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("evaluate %s with %s: %w\n%s", cmp.Or(module, "fleetd.nix"), js, err, stderrOf(err))
	}
	return out, nil
}

// evalNixOS evaluates deploy/nixos/fleetd.nix with the given option values; it must succeed.
func evalNixOS(t *testing.T, values map[string]map[string]any) nixosConfig {
	t.Helper()
	out, err := nixEval(t, "", values)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Config nixosConfig `json:"config"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("decode the evaluated module: %v\n%s", err, out)
	}
	return res.Config
}

// sporeValues are the option values of spore's fleetd: the required ones, two secrets, and extra.
func sporeValues(pkg any, extra map[string]any) map[string]map[string]any {
	v := map[string]any{"enable": true, "package": pkg, "configFile": "/etc/fleetd/fleetd.yaml",
		"secretFiles": map[string]string{"netbox-token": "/var/lib/secrets/fleetd/netbox-token", "ldevid-ca-key": "/var/lib/secrets/fleetd/ldevid-ca.key"}}
	for k, x := range extra {
		v[k] = x
	}
	return map[string]map[string]any{"fleetd": v}
}

// nixPackage is a package option's value as NixOS passes one: a derivation (nixpkgs'
// isDerivation: type = "derivation"), whose outPath here is a directory holding bin/fleetd.
func nixPackage(outPath string) map[string]string {
	return map[string]string{"type": "derivation", "name": "fleetd", "outPath": outPath}
}

// wantNixError evaluates module ("" for deploy/nixos/fleetd.nix) with values and checks that the
// evaluation fails with a message containing each line of want (nix indents the lines it prints).
func wantNixError(t *testing.T, module string, values any, want string) {
	t.Helper()
	out, err := nixEval(t, module, values)
	if err == nil {
		t.Fatalf("the evaluation succeeded, want it to fail with %q; it gave:\n%s", want, out)
	}
	for _, line := range strings.Split(want, "\n") {
		if !strings.Contains(err.Error(), line) {
			t.Errorf("the evaluation failed with:\n%v\nwant a message containing %q", err, line)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck runs `fleetd check` as the infrastructure repo's CI would.
func TestCheck(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "classes.json")
	if err := os.WriteFile(bad, []byte(`{"classes": {"a": {"kind": "windows"}, "b": {"kind": "talos"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	hooks, err := os.ReadFile("netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	misspelt := filepath.Join(t.TempDir(), "netbox-webhooks.yaml")
	if err := os.WriteFile(misspelt, bytes.ReplaceAll(hooks, []byte("path: /v1/netbox/webhook/provision\n"), []byte("path: /v1/netbox/webhook/provison\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	oldLab := filepath.Join(t.TempDir(), "classes.json")
	if err := os.WriteFile(oldLab, []byte(`{"classes": {"ubuntu-lab": {"kind": "cloud-init-nocloud",
		"templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "http://x/i.raw",
		"cloud_init": {"user_data": "#cloud-config\nusers:\n  - name: ops\n    ssh_authorized_keys: []\n"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	h := strings.Repeat("a", 64)
	policy := func(body string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "boot-policy.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withPolicy := func(p string) []string {
		return []string{"--skip-files", "--config", "examples/fleetd.yaml", "--classes", "examples/classes.json",
			"--webhooks", "netbox-webhooks.yaml", "--boot-policy", p}
	}
	rows := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"ok/the example boot policy", withPolicy("examples/boot-policy.json"), 0, []string{"fleetd check: ok"}},
		{"refuse/a boot policy for a class classes.json lacks", withPolicy(policy(`{"version":1,"fleet":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}],` +
			`"classes":{"gpu-worker":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}]}}`)), 1,
			[]string{`the boot policy has a list for "gpu-worker", which classes.json does not have`}},
		{"refuse/a boot policy that allows an installable class nothing", withPolicy(policy(`{"version":1,"fleet":[],` +
			`"classes":{"talos-cp":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}]}}`)), 1,
			[]string{"allows no boot for the installable classes", "talos-worker"}},
		{"refuse/a malformed boot policy", withPolicy(policy(`{"version":1,"fleet":[{"efi_applications":["nope"]}]}`)), 1,
			[]string{`"nope" is not a lowercase hex SHA-256`}},
		{"ok/the examples, without spore's files", []string{"--skip-files", "--config", "examples/fleetd.yaml",
			"--classes", "examples/classes.json", "--webhooks", "netbox-webhooks.yaml"}, 0, []string{"fleetd check: ok"}},
		{"refuse/the examples need spore's secret files", []string{"--config", "examples/fleetd.yaml",
			"--classes", "examples/classes.json", "--webhooks", "netbox-webhooks.yaml"}, 1, []string{"netbox.token_file: cannot read"}},
		{"refuse/every problem of a bad classes.json", []string{"--skip-files", "--config", "examples/fleetd.yaml",
			"--classes", bad, "--webhooks", "netbox-webhooks.yaml"}, 1, []string{`class "a": "kind" "windows" is unknown`, `class "b": kind talos needs a "talos" block`}},
		{"refuse/a webhook path fleetd does not serve", []string{"--skip-files", "--config", "examples/fleetd.yaml",
			"--classes", "examples/classes.json", "--webhooks", misspelt}, 1,
			[]string{"calls /v1/netbox/webhook/provison, which fleetd does not serve", "no webhook calls /v1/netbox/webhook/provision"}},
		{"refuse/no such config", []string{"--config", "nope.yaml"}, 1, []string{"nope.yaml"}},
		{"refuse/user-data real cloud-init refuses", []string{"--skip-files", "--config", "examples/fleetd.yaml",
			"--classes", oldLab, "--webhooks", "netbox-webhooks.yaml"}, 1,
			[]string{`class "ubuntu-lab": cloud_init.user_data is refused by cloud-init: Cloud config schema errors: users.0:`}},
	}
	if _, err := exec.LookPath("cloud-init"); err != nil {
		t.Fatal("cloud-init is not installed (make deps installs it): fleetd check's cloud-init rows need it")
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(append([]string{"check"}, r.args...), &out, &errOut)
			if code != r.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, r.wantCode, out.String(), errOut.String())
			}
			all := out.String() + errOut.String()
			for _, w := range r.want {
				if !strings.Contains(all, w) {
					t.Errorf("output does not contain %q:\n%s", w, all)
				}
			}
		})
	}
}

// TestCheckWithoutCloudInit: where cloud-init is not installed, fleetd check says plainly that it
// did not validate the cloud-init classes' user-data, and does not fail for it.
func TestCheckWithoutCloudInit(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut bytes.Buffer
	code := run([]string{"check", "--skip-files", "--config", "examples/fleetd.yaml", "--classes", "examples/classes.json",
		"--webhooks", "netbox-webhooks.yaml"}, &out, &errOut)
	want := `fleetd check: note: cloud-init is not installed here, so class "ubuntu-lab"'s user-data was NOT validated`
	if code != 0 || !strings.Contains(out.String(), want) {
		t.Errorf("exit %d, want 0 and %q\nstdout: %s\nstderr: %s", code, want, out.String(), errOut.String())
	}
}

package cli

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
	hooks, err := os.ReadFile("../netbox-webhooks.yaml")
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
	noCluster := filepath.Join(t.TempDir(), "fleetd.yaml")
	example, err := os.ReadFile("../examples/fleetd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(example, []byte("\ncluster:\n"))
	j := bytes.Index(example, []byte("\nclasses_file:"))
	if i < 0 || j < i {
		t.Fatal("examples/fleetd.yaml has no cluster: section before classes_file")
	}
	if err := os.WriteFile(noCluster, append(append([]byte{}, example[:i]...), example[j:]...), 0o644); err != nil {
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
		return []string{"--skip-files", "--config", "../examples/fleetd.yaml", "--classes", "../examples/classes.json",
			"--webhooks", "../netbox-webhooks.yaml", "--boot-policy", p}
	}
	rows := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"ok/the example boot policy", withPolicy("../examples/boot-policy.json"), 0, []string{"fleetd check: ok"}},
		{"refuse/a boot policy for a class classes.json lacks", withPolicy(policy(`{"version":1,"fleet":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}],` +
			`"classes":{"gpu-worker":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}]}}`)), 1,
			[]string{`the boot policy has a list for "gpu-worker", which classes.json does not have`}},
		{"refuse/a boot policy that allows an installable class nothing", withPolicy(policy(`{"version":1,"fleet":[],` +
			`"classes":{"talos-cp":[{"name":"","efi_applications":["` + h + `"],"loaded_files":[]}]}}`)), 1,
			[]string{"allows no boot for the installable classes", "talos-worker"}},
		{"refuse/a malformed boot policy", withPolicy(policy(`{"version":1,"fleet":[{"efi_applications":["nope"]}]}`)), 1,
			[]string{`"nope" is not a lowercase hex SHA-256`}},
		{"ok/the examples, without spore's files", []string{"--skip-files", "--config", "../examples/fleetd.yaml",
			"--classes", "../examples/classes.json", "--webhooks", "../netbox-webhooks.yaml"}, 0, []string{"fleetd check: ok"}},
		{"refuse/the examples need spore's secret files", []string{"--config", "../examples/fleetd.yaml",
			"--classes", "../examples/classes.json", "--webhooks", "../netbox-webhooks.yaml"}, 1, []string{"netbox.token_file: cannot read"}},
		{"refuse/every problem of a bad classes.json", []string{"--skip-files", "--config", "../examples/fleetd.yaml",
			"--classes", bad, "--webhooks", "../netbox-webhooks.yaml"}, 1, []string{`class "a": "kind" "windows" is unknown`, `class "b": kind talos needs a "talos" block`}},
		{"refuse/a webhook path fleetd does not serve", []string{"--skip-files", "--config", "../examples/fleetd.yaml",
			"--classes", "../examples/classes.json", "--webhooks", misspelt}, 1,
			[]string{"calls /v1/netbox/webhook/provison, which fleetd does not serve", "no webhook calls /v1/netbox/webhook/provision"}},
		{"refuse/no such config", []string{"--config", "nope.yaml"}, 1, []string{"nope.yaml"}},
		{"refuse/talos classes join Kubernetes and no workload cluster is set", []string{"--skip-files", "--config", noCluster,
			"--classes", "../examples/classes.json", "--webhooks", "../netbox-webhooks.yaml"}, 1,
			[]string{"classes talos-cp, talos-worker join Kubernetes", "cluster.kubeconfig is not set"}},
		{"refuse/user-data real cloud-init refuses", []string{"--skip-files", "--config", "../examples/fleetd.yaml",
			"--classes", oldLab, "--webhooks", "../netbox-webhooks.yaml"}, 1,
			[]string{`class "ubuntu-lab": cloud_init.user_data is refused by cloud-init: Cloud config schema errors: users.0:`}},
	}
	if _, err := exec.LookPath("cloud-init"); err != nil {
		t.Fatal("cloud-init is not installed (make deps installs it): fleetd check's cloud-init rows need it")
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Check(r.args, &out, &errOut)
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
	code := Check([]string{"--skip-files", "--config", "../examples/fleetd.yaml", "--classes", "../examples/classes.json",
		"--webhooks", "../netbox-webhooks.yaml"}, &out, &errOut)
	want := `fleetd check: note: cloud-init is not installed here, so class "ubuntu-lab"'s user-data was NOT validated`
	if code != 0 || !strings.Contains(out.String(), want) {
		t.Errorf("exit %d, want 0 and %q\nstdout: %s\nstderr: %s", code, want, out.String(), errOut.String())
	}
}

// TestCheckTemplates: with --templates, fleetd check renders every Template a class names as
// fleetd renders it for a request and applies the Template checks; a wipe or retirement Template
// without the receipt step is named with what to add, so that an upgrade does not leave every
// wipe unconfirmed (docs/operate.md, "The wipe receipt step"), and a Talos provision Template
// without its META step, whose nodes would never be served their configuration (docs/operate.md,
// "The Talos META step"). It renders them as the Tinkerbell
// the config names does (kubernetes.tinkerbell_version): a function v0.25's controller lacks is
// refused with that controller's reason, and passes for a site on v0.12 (docs/operate.md,
// "Tinkerbell").
func TestCheckTemplates(t *testing.T) {
	site := func(t *testing.T, change func(dir string)) string {
		t.Helper()
		dir := t.TempDir()
		files, err := filepath.Glob("../examples/tinkerbell/*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		change(dir)
		return dir
	}
	edit := func(file, old, new string) func(string) {
		return func(dir string) {
			p := filepath.Join(dir, file)
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Contains(b, []byte(old)) {
				t.Fatalf("%s holds no %q (%v)", file, old, err)
			}
			if err := os.WriteFile(p, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The example wipe Template ends with its receipt step: a site's Template from before it.
	dropReceipt := func(dir string) {
		p := filepath.Join(dir, "wipe.yaml")
		b, err := os.ReadFile(p)
		i := bytes.Index(b, []byte("          - name: wipe-receipt\n"))
		if err != nil || i < 0 {
			t.Fatalf("wipe.yaml has no receipt step (%v)", err)
		}
		if err := os.WriteFile(p, b[:i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The example config, on tink v0.12.
	v012 := func() string {
		b, err := os.ReadFile("../examples/fleetd.yaml")
		old := []byte("tinkerbell_version: v0.25 ")
		if err != nil || !bytes.Contains(b, old) {
			t.Fatalf("examples/fleetd.yaml names no %q (%v)", old, err)
		}
		p := filepath.Join(t.TempDir(), "fleetd.yaml")
		if err := os.WriteFile(p, bytes.Replace(b, old, []byte("tinkerbell_version: v0.12 "), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}()
	// env is in sprig's whole set (v0.12) but not in its hermetic one (v0.25); an unset
	// variable renders nothing, so the Template is otherwise the example's.
	withEnv := site(t, edit("attest.yaml", `FLEETD_DEVICE: "{{.device_name}}"`, `FLEETD_DEVICE: "{{.device_name}}{{ env "FLEETD_CHECK_UNSET" }}"`))
	noReceipt := "no action after the agent has FLEETD_ACTION=wipe-receipt: fleetd cannot confirm this %s's erase and records it unconfirmed; " +
		"add right after the erase, which must report to wipe-result in the shared directory, the action {name: wipe-receipt, image: ghcr.io/folly-infra/fleetd-agent:v0.1.0, timeout: 120, environment: {FLEETD_ACTION: wipe-receipt}}"
	rows := []struct {
		name     string
		config   string // "" is the example config (v0.25)
		dir      string
		wantCode int
		want     []string
	}{
		{"ok/the example Templates", "", "../examples/tinkerbell", 0, []string{"fleetd check: ok"}},
		{"refuse/a wipe Template without the receipt step", "", site(t, dropReceipt),
			1, []string{`class "alpine-edge", "nixos-builder", "talos-cp", "talos-worker", "ubuntu-lab": wipe: Template wipe: ` + strings.ReplaceAll(noReceipt, "%s", "wipe")}},
		{"refuse/a retirement Template whose receipt step is misspelt", "", site(t, edit("retire.yaml", "FLEETD_ACTION: wipe-receipt", "FLEETD_ACTION: wipe_receipt")),
			1, []string{`"talos-worker", "ubuntu-lab": retire: Template retire: ` + strings.ReplaceAll(noReceipt, "%s", "retire")}},
		{"refuse/a Talos provision Template without the META step (a site's from before it)", "", site(t, edit("talos-provision.yaml", "FLEETD_ACTION: talos-meta", "FLEETD_ACTION_UNUSED: talos-meta")),
			1, []string{`class "talos-cp", "talos-worker": provision: Template talos-provision: no action after the agent has FLEETD_ACTION=talos-meta in the agent's image: ` +
				"a Talos node fetches its configuration with the fetch secret as its URL's code, which Talos reads from the disk's META; " +
				"add right after the image write the action {name: talos-meta, image: ghcr.io/folly-infra/fleetd-agent:v0.1.0, timeout: 120, environment: {FLEETD_ACTION: talos-meta}}"}},
		{"refuse/a Template a class names is not there", "", site(t, func(dir string) { _ = os.Remove(filepath.Join(dir, "attest.yaml")) }),
			1, []string{`"talos-cp", "talos-worker", "ubuntu-lab": its attest Template attest is not in`}},
		{"refuse/a Template fleetd would refuse for a request", "", site(t, edit("attest.yaml", `FLEETD_REQUEST: "{{.request}}"`, `FLEETD_REQUEST: "attest-old"`)),
			1, []string{`"nixos-builder", "talos-cp", "talos-worker", "ubuntu-lab": attest: Template attest: first action fleetd-enroll has FLEETD_REQUEST="attest-old"`}},
		{"refuse/no Template at all", "", t.TempDir(), 1, []string{"no Template manifest (kind: Template) in"}},
		{"refuse/v0.25: a function its controller lacks", "", withEnv,
			1, []string{`"nixos-builder", "talos-cp", "talos-worker", "ubuntu-lab": attest: Template attest does not render as Tinkerbell v0.25 would render it: `, `function "env" not defined`}},
		{"ok/v0.12: the same Template, as its controller renders it", v012, withEnv, 0, []string{"fleetd check: ok"}},
		{"ok/v0.12: the example Templates", v012, "../examples/tinkerbell", 0, []string{"fleetd check: ok"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			config := r.config
			if config == "" {
				config = "../examples/fleetd.yaml"
			}
			code := Check([]string{"--skip-files", "--config", config, "--classes", "../examples/classes.json",
				"--webhooks", "../netbox-webhooks.yaml", "--templates", r.dir}, &out, &errOut)
			all := out.String() + errOut.String()
			if code != r.wantCode {
				t.Fatalf("exit %d, want %d\n%s", code, r.wantCode, all)
			}
			for _, w := range r.want {
				if !strings.Contains(all, w) {
					t.Errorf("output does not contain %q:\n%s", w, all)
				}
			}
		})
	}
}

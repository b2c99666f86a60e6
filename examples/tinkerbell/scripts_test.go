package exampletemplates_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

const serial = "S6B0NL0W123456"

// script is one shell action of a rendered Template, with the environment Tinkerbell's worker gives it.
type script struct {
	template, action, body string
	env                    map[string]string
}

// exampleHardwareMap is the hardwareMap fleetd gives a provision of node-a, which the example
// Templates are rendered with.
func exampleHardwareMap() map[string]string {
	return map[string]string{"device_1": "3c:ec:ef:4c:4f:54", "disk_serial": serial, "fleetd_url": "https://spore.folly:8443",
		"device_name": "node-a", "device_id": "1", "request": "provision-aaaaaaaa", "action": "provision",
		"image_url": "https://images.folly/os.raw.zst", "global_timeout": "3600"}
}

// scripts renders every example Template and returns its /bin/sh -c actions.
func scripts(t *testing.T) []script {
	t.Helper()
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil {
		t.Fatal(err)
	}
	hm := exampleHardwareMap()
	var out []script
	for _, tpl := range tpls {
		var r workflows.Rendered
		for _, v := range workflows.Versions { // the example Templates serve either Tinkerbell
			var err error
			if r, err = workflows.RenderTemplate(v, *tpl.Spec.Data, hm, nil); err != nil {
				t.Fatalf("render %s for Tinkerbell %s: %v", tpl.Name, v, err)
			}
			if err := workflows.CheckTemplate(v, tpl.Name, r, hm); err != nil {
				t.Fatalf("check %s for Tinkerbell %s: %v", tpl.Name, v, err)
			}
		}
		for action, tplName := range map[fleet.Action]string{fleet.ActionWipe: "wipe", fleet.ActionRetire: "retire"} {
			if tplName == tpl.Name {
				if err := workflows.CheckWipeReceipt(tpl.Name, r, action); err != nil {
					t.Fatalf("check %s: %v", tpl.Name, err)
				}
			}
		}
		for kind, tplName := range map[fleet.Kind]string{fleet.KindCloudInit: "cloud-init-nocloud-provision",
			fleet.KindNixOS: "nixos-image-provision", fleet.KindAlpine: "alpine-image-provision", fleet.KindTalos: "talos-provision"} {
			if tplName == tpl.Name {
				if err := workflows.CheckFetchSecret(tpl.Name, r, fleet.ActionProvision, kind); err != nil {
					t.Fatalf("check %s: %v", tpl.Name, err)
				}
			}
		}
		for _, a := range r.Tasks[0].Actions {
			if len(a.Command) == 3 && a.Command[0] == "/bin/sh" && a.Command[1] == "-c" {
				out = append(out, script{tpl.Name, a.Name, a.Command[2], workflows.MergedEnv(r.Tasks[0], a)})
			}
		}
	}
	return out
}

func find(t *testing.T, all []script, template, action string) script {
	t.Helper()
	for _, s := range all {
		if s.template == template && s.action == action {
			return s
		}
	}
	t.Fatalf("no shell action %s in Template %s", action, template)
	return script{}
}

// TestScriptsParseAndAgree: every shell action parses, and every Template that erases a disk
// runs the same wipe-disk script.
func TestScriptsParseAndAgree(t *testing.T) {
	all := scripts(t)
	wipe := find(t, all, "wipe", "wipe-disk")
	wipers := 0
	for _, s := range all {
		if out, err := exec.Command("/bin/sh", "-n", "-c", s.body).CombinedOutput(); err != nil {
			t.Errorf("%s/%s does not parse: %v %s", s.template, s.action, err, out)
		}
		if s.action == "wipe-disk" {
			wipers++
			if s.body != wipe.body {
				t.Errorf("%s/wipe-disk differs from wipe/wipe-disk; keep one script", s.template)
			}
		}
	}
	secret := find(t, all, "nixos-image-provision", "write-fetch-secret")
	if find(t, all, "alpine-image-provision", "write-fetch-secret").body != secret.body {
		t.Errorf("alpine-image-provision/write-fetch-secret differs from nixos-image-provision's; keep one script")
	}
	if wipers != 6 {
		t.Errorf("%d Templates run wipe-disk, want 6 (four provisions, wipe, retire)", wipers)
	}
}

// machine is a fake /dev, /sys and shared directory for the scripts' FLEETD_* roots.
type machine struct{ dev, sys, wf string }

func newMachine(t *testing.T) machine {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := machine{filepath.Join(root, "dev"), filepath.Join(root, "sys"), filepath.Join(root, "workflow")}
	for _, d := range []string{filepath.Join(m.dev, "disk", "by-id"), filepath.Join(m.sys, "block"), m.wf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// disk adds a block device; byID names its /dev/disk/by-id link ("" for none) and serialFile
// is where sysfs shows its serial ("device/serial" for NVMe and SCSI, "serial" for virtio).
func (m machine) disk(t *testing.T, name, serial, byID, serialFile string) {
	write(t, filepath.Join(m.dev, name), "")
	if byID != "" {
		if err := os.Symlink("../../"+name, filepath.Join(m.dev, "disk", "by-id", byID)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(m.sys, "block", name, serialFile), serial+"      \n")
}

// run runs the script with the Template's environment, the machine's roots in place of /dev, /sys
// and the request's shared directory (the Template's FLEETD_WORKFLOW_DIR, a path in the
// container), and env on top.
func (m machine) run(s script, env map[string]string) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", s.body)
	all := map[string]string{}
	for k, v := range s.env {
		all[k] = v
	}
	for k, v := range map[string]string{"PATH": os.Getenv("PATH"), "DRY_RUN": "1", "FLEETD_DEVFS": m.dev,
		"FLEETD_SYSFS": m.sys, "FLEETD_WORKFLOW_DIR": m.wf} {
		all[k] = v
	}
	for k, v := range env {
		all[k] = v
	}
	for k, v := range all {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestFetchSecretCarried: a provision Template of a kind whose install carries the fetch secret
// is refused when no action takes the agent's fetch-secret file to the fetch: the Talos
// Template, whose talos-meta step writes it into META, for a nixos-image class; the nixos-image
// Template, which has no talos-meta step, for a Talos class. Each passes for its own kind.
func TestFetchSecretCarried(t *testing.T) {
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil {
		t.Fatal(err)
	}
	hm := exampleHardwareMap()
	checked := 0
	for _, tpl := range tpls {
		var own, other fleet.Kind
		var want string
		switch tpl.Name {
		case "talos-provision":
			own, other, want = fleet.KindTalos, fleet.KindNixOS, "no action after the agent has FLEETD_FETCH_SECRET_FILE=fetch-secret"
		case "nixos-image-provision":
			own, other, want = fleet.KindNixOS, fleet.KindTalos, "no action after the agent has FLEETD_ACTION=talos-meta in the agent's image"
		default:
			continue
		}
		checked++
		r, err := workflows.RenderTemplate(workflows.DefaultVersion, *tpl.Spec.Data, hm, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := workflows.CheckFetchSecret(tpl.Name, r, fleet.ActionProvision, other); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refuse/%s for a %s class: %v, want %q", tpl.Name, other, err, want)
		}
		if err := workflows.CheckFetchSecret(tpl.Name, r, fleet.ActionProvision, own); err != nil {
			t.Errorf("ok/%s for a %s class: %v", tpl.Name, own, err)
		}
	}
	if checked != 2 {
		t.Errorf("checked %d Templates, want talos-provision and nixos-image-provision", checked)
	}
}

// BenchmarkRenderTemplate renders the Talos provision Template as fleetd does for every new
// Workflow (workflows.RenderTemplate; docs/performance.md): a storm renders it once per request.
func BenchmarkRenderTemplate(b *testing.B) {
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil {
		b.Fatal(err)
	}
	data := ""
	for _, tpl := range tpls {
		if tpl.Name == "talos-provision" {
			data = *tpl.Spec.Data
		}
	}
	if data == "" {
		b.Fatal("no talos-provision Template among the examples")
	}
	hm := exampleHardwareMap()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := workflows.RenderTemplate(workflows.DefaultVersion, data, hm, nil); err != nil {
			b.Fatal(err)
		}
	}
}

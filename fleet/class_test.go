package fleet

import (
	"os"
	"strings"
	"testing"
)

func TestExampleClassesLoad(t *testing.T) {
	f, err := os.Open("../examples/classes.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cat, err := LoadCatalog(f)
	if err != nil {
		t.Fatalf("examples/classes.json: %v", err)
	}
	kinds := map[Kind]bool{}
	for _, n := range cat.Names() {
		c, _ := cat.Class(n)
		if c.Installable {
			kinds[c.Kind] = true
		}
	}
	for _, k := range Kinds {
		if !kinds[k] {
			t.Errorf("examples/classes.json has no installable class of kind %s", k)
		}
	}
	if g2, ok := cat.Class("worker-g2"); !ok || g2.Installable {
		t.Errorf("examples/classes.json must declare worker-g2 as not installable")
	}
	// Talos classes join the cluster by default; the other kinds go active at delivery.
	for name, joins := range map[string]bool{"talos-cp": true, "talos-worker": true,
		"nixos-builder": false, "alpine-edge": false, "ubuntu-lab": false} {
		if c, _ := cat.Class(name); c.JoinsKubernetes != joins {
			t.Errorf("class %s: JoinsKubernetes = %v, want %v", name, c.JoinsKubernetes, joins)
		}
	}
}

func TestJoinsKubernetes(t *testing.T) {
	talos := func(extra string) string {
		return `{"classes": {"c": {"kind": "talos", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "i", "talos": {"machine_type": "worker"}` + extra + `}}}`
	}
	rows := []struct {
		name, json string
		want       bool
	}{
		{"ok/talos joins by default", talos(""), true},
		{"ok/talos says it joins", talos(`, "joins_kubernetes": true`), true},
		{"ok/talos outside the cluster fleetd watches", talos(`, "joins_kubernetes": false`), false},
		{"ok/nixos says it does not", `{"classes": {"c": {"kind": "nixos-image", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "i", "profile": "p", "joins_kubernetes": false}}}`, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cat, err := LoadCatalog(strings.NewReader(r.json))
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := cat.Class("c"); c.JoinsKubernetes != r.want {
				t.Errorf("JoinsKubernetes = %v, want %v", c.JoinsKubernetes, r.want)
			}
		})
	}
}

func TestLoadCatalogRefusals(t *testing.T) {
	rows := []struct {
		name, json string
		want       []string // every line the error must contain
	}{
		{"refuse/not JSON", `{`, []string{"decode classes"}},
		{"refuse/unknown key", `{"classes": {"a": {"kind": "talos", "colour": "red"}}}`, []string{`unknown field "colour"`}},
		{"refuse/empty", `{"classes": {}}`, []string{`"classes" is empty`}},
		{"refuse/every problem listed", `{"classes": {
			"Bad_Name": {"kind": "talos", "installable": false, "reason": "x"},
			"a": {"kind": "windows"},
			"b": {"kind": "talos", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r", "reboot": "x"}, "image": "i", "talos": {"machine_type": "boss"}},
			"c": {"kind": "nixos-image", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "i", "talos": {"machine_type": "worker"}},
			"d": {"kind": "alpine-image", "installable": false},
			"e": {"kind": "cloud-init-nocloud", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "i", "workflow_timeout": "0s", "secure_boot": "maybe", "joins_kubernetes": true}
		}}`, []string{
			`class "e": "joins_kubernetes" is true but its kind is cloud-init-nocloud`,
			`class "Bad_Name": name must be lowercase`,
			`class "a": "kind" "windows" is unknown`,
			`class "a": "templates" names no Template for provision`,
			`class "a": "image" is missing`,
			`class "b": "templates" has unknown action "reboot"`,
			`class "b": "talos.machine_type" "boss" is unknown`,
			`class "c": has a "talos" block but its kind is nixos-image`,
			`class "c": kind nixos-image needs "profile"`,
			`class "d": "installable" is false but "reason" is empty`,
			`class "e": "workflow_timeout" 0s is shorter than a minute`,
			`class "e": "secure_boot" "maybe" is unknown`,
			`class "e": kind cloud-init-nocloud needs "cloud_init.user_data"`,
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			_, err := LoadCatalog(strings.NewReader(r.json))
			if err == nil {
				t.Fatal("LoadCatalog accepted it")
			}
			for _, w := range r.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestClassNetboot: a class's "netboot" block: allowNetboot is toggled unless the block says not,
// the boot mode and ISO URL are kept as given.
func TestClassNetboot(t *testing.T) {
	const class = `"kind": "talos", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}, "image": "i", "talos": {"machine_type": "worker"}`
	for _, r := range []struct {
		name, netboot string
		want          Netboot
	}{
		{"ok/no block: toggled", ``, Netboot{ToggleAllowNetboot: true}},
		{"ok/a block that does not say: toggled", `, "netboot": {"boot_mode": "netboot"}`, Netboot{ToggleAllowNetboot: true, BootMode: "netboot"}},
		{"ok/a block that says not", `, "netboot": {"toggle_allow_netboot": false}`, Netboot{}},
		{"ok/a block that says so, booting an ISO", `, "netboot": {"toggle_allow_netboot": true, "boot_mode": "iso", "iso_url": "http://img/x.iso"}`,
			Netboot{ToggleAllowNetboot: true, BootMode: "iso", ISOURL: "http://img/x.iso"}},
	} {
		t.Run(r.name, func(t *testing.T) {
			cat, err := LoadCatalog(strings.NewReader(`{"classes": {"a": {` + class + r.netboot + `}}}`))
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := cat.Class("a"); c.Netboot != r.want {
				t.Errorf("netboot %+v, want %+v", c.Netboot, r.want)
			}
		})
	}
}

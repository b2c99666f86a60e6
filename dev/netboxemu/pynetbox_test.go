package netboxemu

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Debian's interpreter: the python3 first on this machine's PATH does not see Debian's
// packages (reference: pynetbox 7.0.0 is python3-pynetbox, installed by `make deps`).
const debianPython = "/usr/bin/python3"

// seedClientInventory adds the devices testdata/pynetbox_client.py expects next to the
// fixture's node1 (ids 2 to 5, in this order).
func seedClientInventory(t *testing.T, f *fixture) {
	t.Helper()
	for _, spec := range []DeviceSpec{
		{Name: "node2", Serial: "SN-2B", CustomFields: map[string]any{"fleet_class": "talos-cp"}},
		{Name: "worker-a", Serial: "SN-3A", Status: "active",
			Interfaces:   []InterfaceSpec{{Name: "eth0", MACs: []string{"aa:bb:cc:00:22:01"}}},
			CustomFields: map[string]any{"fleet_class": "talos-worker", "tpm": "2.0", "fleet_state": "pending"}},
		{Name: "worker-b", Serial: "SN-4", Status: "active",
			Interfaces:   []InterfaceSpec{{Name: "eth0", MACs: []string{"aa:bb:cc:00:22:02"}}},
			CustomFields: map[string]any{"fleet_class": "talos-worker", "fleet_state": "active", "disk_serial": "DISK-B"}},
		{Name: "nix-builder", CustomFields: map[string]any{"fleet_class": "nixos-builder"}},
	} {
		if _, err := f.emu.AddDevice(spec); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPynetbox drives the emulator with pynetbox, a widely used NetBox client the project did
// not write: listing, paging, get, NetBox's filters (custom fields with their filter logic,
// lookups, q) and the refusal of filters the emulator does not implement, the output
// parameters, OPTIONS choices, one-field saves, atomic bulk update and delete, journal entries,
// the change log with its filters, the requests fleetd itself makes, and what the installed
// pynetbox does when it saves a device whose JSON custom field holds an object, as every device
// fleetd enrolled does (docs/netbox.md: 7.0.0 cannot).
func TestPynetbox(t *testing.T) {
	if _, err := exec.LookPath(debianPython); err != nil {
		t.Fatalf("%s is missing: `make deps` installs python3-pynetbox with Debian's Python", debianPython)
	}
	if out, err := exec.Command(debianPython, "-c", "import pynetbox").CombinedOutput(); err != nil {
		t.Fatalf("pynetbox is not importable by %s (`make deps` installs python3-pynetbox): %v\n%s", debianPython, err, out)
	}
	f := newFixture(t)
	seedClientInventory(t, f)
	cmd := exec.Command(debianPython, "testdata/pynetbox_client.py", f.emu.URL(), f.admin, f.fleetd)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "done" {
		t.Fatalf("pynetbox against the emulator failed (%v):\n%s", err, out)
	}
	for _, want := range []string{"filters-custom-fields", "bulk-update-atomic", "bulk-delete-atomic", "change-log", "fleetd-calls", "save-json-object-custom-field"} {
		if !slices.Contains(lines, "ok "+want) {
			t.Errorf("check %s did not run:\n%s", want, out)
		}
	}
	// The refused bulk update left no trace: worker-a has the accepted bulk update (admin) and
	// fleetd's PATCH, nothing else.
	var got []string
	for _, ch := range f.emu.Changes("dcim.device", 3) {
		got = append(got, ch.User+" "+ch.Action)
	}
	if want := []string{"admin update", "fleetd update"}; !slices.Equal(got, want) {
		t.Errorf("worker-a's change log = %v, want %v", got, want)
	}
}

package stack

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// byIDSerials is what a machine's disk/by-id says, as the agent reads it: each link's device and
// the serial after its last "_".
func byIDSerials(t *testing.T, dir string) []string {
	t.Helper()
	byID := filepath.Join(dir, MachineDevDir, "disk", "by-id")
	entries, err := os.ReadDir(byID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(byID, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.Base(target)+"="+e.Name()[strings.LastIndex(e.Name(), "_")+1:])
	}
	sort.Strings(out)
	return out
}

func hardwareMachine(t *testing.T) (Info, string) {
	t.Helper()
	dir := t.TempDir()
	d := SeedDevice{Name: "m", Class: "talos-worker"}
	if err := writeMachineFS(dir, "3f0c7a52-8d1e-4b7a-9c55-0c1d2e3f4a5b", chassisSerial(0), mac(0), machineDisks(d, 0)); err != nil {
		t.Fatal(err)
	}
	// An installed machine: writeImage's partitions on sda and the OS on the install disk.
	for _, p := range []string{filepath.Join(dir, MachineSysDir, "block", "sda", "sda1"), filepath.Join(dir, MachineDiskDir)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, MachineDiskDir, "IMAGE"), []byte("talos\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Info{Machines: map[string]Machine{"m": {Dir: dir, MAC: mac(0), DiskSerial: diskSerial(0)}}}, dir
}

// TestHardwareChanges changes a simulated machine's disks and MAC as `fleetsim machine NAME
// swap-disk|add-disk|set-mac` does, and reads them back as the agent and the netboot read them.
func TestHardwareChanges(t *testing.T) {
	info, dir := hardwareMachine(t)
	installed := func() bool {
		_, err := os.Stat(filepath.Join(dir, MachineDiskDir, "IMAGE"))
		return err == nil
	}

	t.Run("ok/set-mac", func(t *testing.T) {
		if got, _ := MachineMAC(info.Machines["m"]); got != mac(0) {
			t.Fatalf("a new machine's MAC is %q, want the declared %s", got, mac(0))
		}
		c, err := SetMAC(info, "m", "02:F6:00:00:00:2A")
		if err != nil || c.Before != mac(0) || c.After != "02:f6:00:00:00:2a" {
			t.Fatalf("SetMAC = %+v, %v", c, err)
		}
		if got, _ := MachineMAC(info.Machines["m"]); got != "02:f6:00:00:00:2a" {
			t.Errorf("after set-mac the machine's MAC is %q", got)
		}
		if info.Machines["m"].MAC != mac(0) {
			t.Errorf("stack.json's MAC changed")
		}
		c, err = SetMAC(info, "m", "")
		if err != nil || !strings.HasPrefix(c.After, "02:f6:") || c.Before != "02:f6:00:00:00:2a" {
			t.Errorf("SetMAC with a random MAC = %+v, %v", c, err)
		}
	})
	t.Run("refuse/set-mac", func(t *testing.T) {
		now, _ := MachineMAC(info.Machines["m"])
		for _, bad := range []string{"not-a-mac", "02:f6:00:00:00:00:00:01", now} {
			if _, err := SetMAC(info, "m", bad); err == nil {
				t.Errorf("SetMAC(%q) accepted", bad)
			}
		}
		if got, _ := MachineMAC(info.Machines["m"]); got != now {
			t.Errorf("a refused set-mac changed the MAC to %s", got)
		}
	})
	t.Run("ok/swap-disk-clone", func(t *testing.T) {
		c, err := SwapDisk(info, "m", "sda", "CLONE0001", true)
		if err != nil || c.Before != diskSerial(0) || c.After != "CLONE0001" || !strings.Contains(c.What, "boots as before") {
			t.Fatalf("SwapDisk --clone = %+v, %v", c, err)
		}
		if got := strings.Join(byIDSerials(t, dir), " "); got != "sda=CLONE0001 sdb=FSIM0010DATA" {
			t.Errorf("disks after the swap: %s", got)
		}
		if !installed() {
			t.Errorf("a cloned disk lost the install")
		}
	})
	t.Run("ok/swap-disk", func(t *testing.T) {
		c, err := SwapDisk(info, "m", "", "", false)
		if err != nil || c.Before != "CLONE0001" || !strings.HasPrefix(c.After, "SWAP") || !strings.Contains(c.What, "blank") {
			t.Fatalf("SwapDisk = %+v, %v", c, err)
		}
		if got := strings.Join(byIDSerials(t, dir), " "); got != "sda="+c.After+" sdb=FSIM0010DATA" {
			t.Errorf("disks after the swap: %s", got)
		}
		b, _ := os.ReadFile(filepath.Join(dir, MachineSysDir, "block", "sda", "device", "serial"))
		if strings.TrimSpace(string(b)) != c.After {
			t.Errorf("sysfs serial %q, want %s", b, c.After)
		}
		if installed() {
			t.Errorf("a blank disk kept the install")
		}
	})
	t.Run("refuse/swap-disk", func(t *testing.T) {
		for _, tc := range []struct{ disk, serial string }{{"sdz", ""}, {"sdb", "FSIM0010DATA"}, {"sdb", "bad serial"}} {
			if _, err := SwapDisk(info, "m", tc.disk, tc.serial, false); err == nil {
				t.Errorf("SwapDisk(%s, %q) accepted", tc.disk, tc.serial)
			}
		}
	})
	t.Run("ok/add-disk", func(t *testing.T) {
		c, err := AddDisk(info, "m", "FSIM0010DATA")
		if err != nil || !strings.Contains(c.What, "sdc") {
			t.Fatalf("AddDisk = %+v, %v", c, err)
		}
		got := byIDSerials(t, dir)
		if len(got) != 3 || got[1] != "sdb=FSIM0010DATA" || got[2] != "sdc=FSIM0010DATA" {
			t.Errorf("disks after add-disk: %v, want sdb and sdc with one serial", got)
		}
	})
	t.Run("refuse/unknown-machine", func(t *testing.T) {
		if _, err := SetMAC(info, "nobody", ""); err == nil {
			t.Errorf("SetMAC of an unknown machine accepted")
		}
	})
}

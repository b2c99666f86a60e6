package stack

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/swtpm"
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

// TestIdentityChanges changes the parts a simulated machine's identity rests on, as `fleetsim
// machine NAME set-uuid|replace-tpm` does: its SMBIOS UUID as the agent and Talos read it, and its
// TPM, whose new EK is certified by the same EK CA while NetBox's declaration is left alone.
func TestIdentityChanges(t *testing.T) {
	info, dir := hardwareMachine(t)
	built := "3f0c7a52-8d1e-4b7a-9c55-0c1d2e3f4a5b"
	info.Machines["m"] = Machine{Dir: dir, SMBIOSUUID: built}
	readUUID := func() string {
		b, err := os.ReadFile(filepath.Join(dir, MachineSysDir, "class", "dmi", "id", "product_uuid"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	t.Run("ok/set-uuid", func(t *testing.T) {
		c, err := SetSMBIOSUUID(info, "m", "5E6F0000-1111-4222-8333-444455556666")
		if err != nil || c.Before != built || c.After != "5e6f0000-1111-4222-8333-444455556666" {
			t.Fatalf("SetSMBIOSUUID = %+v, %v", c, err)
		}
		if got, _ := MachineUUID(info.Machines["m"]); got != c.After || readUUID() != c.After {
			t.Errorf("after set-uuid the machine's UUID is %q (sysfs %q), want %s", got, readUUID(), c.After)
		}
		if info.Machines["m"].SMBIOSUUID != built {
			t.Errorf("stack.json's UUID changed")
		}
		c, err = SetSMBIOSUUID(info, "m", "")
		if err != nil || !uuidForm.MatchString(c.After) || c.Before != "5e6f0000-1111-4222-8333-444455556666" {
			t.Errorf("SetSMBIOSUUID with a random UUID = %+v, %v", c, err)
		}
	})
	t.Run("refuse/set-uuid", func(t *testing.T) {
		now := readUUID()
		for _, bad := range []string{"not-a-uuid", "3f0c7a52-8d1e-4b7a-9c55-0c1d2e3f4a5", now} {
			if _, err := SetSMBIOSUUID(info, "m", bad); err == nil {
				t.Errorf("SetSMBIOSUUID(%q) accepted", bad)
			}
		}
		if readUUID() != now {
			t.Errorf("a refused set-uuid changed the UUID to %s", readUUID())
		}
	})
	t.Run("refuse/replace-tpm-without-a-tpm", func(t *testing.T) {
		if _, err := ReplaceTPM(context.Background(), info, "m"); err == nil {
			t.Errorf("ReplaceTPM of a machine without a TPM accepted")
		}
	})
	t.Run("ok/replace-tpm", func(t *testing.T) {
		info.Dir = t.TempDir() // the stack's state: its EK CA
		old, err := swtpm.Manufacture(context.Background(), filepath.Join(dir, MachineTPMDir), swtpm.Options{CADir: newPaths(info.Dir).ekCA})
		if err != nil {
			t.Fatal(err)
		}
		c, err := ReplaceTPM(context.Background(), info, "m")
		if err != nil || c.Before != old.EKSHA256 || c.After == old.EKSHA256 || len(c.After) != 64 {
			t.Fatalf("ReplaceTPM = %+v, %v; the old EK was %s", c, err, old.EKSHA256)
		}
		now, err := swtpm.Read(filepath.Join(dir, MachineTPMDir))
		if err != nil || now.EKSHA256 != c.After || now.EKCert.Issuer.String() != old.EKCert.Issuer.String() {
			t.Errorf("the machine's TPM after replace-tpm: %v, EK %s issued by %v; want EK %s from the same EK CA (%s)",
				err, now.EKSHA256, now.EKCert.Issuer, c.After, old.EKCert.Issuer)
		}
	})
}

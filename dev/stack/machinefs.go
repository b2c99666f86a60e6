package stack

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// A simulated machine's hardware, as files under its directory: the agent and the example wipe
// action read sysfs and devfs from roots given by FLEETD_SYSFS and FLEETD_DEVFS, so pointing
// them here makes the machine's firmware, disks and boot what these files say.
const (
	MachineSysDir  = "sys"  // sysfs: class/dmi/id (SMBIOS), class/tpm, block/*/device/serial, the event log
	MachineDevDir  = "dev"  // devfs: the disks and disk/by-id
	MachineDiskDir = "disk" // the install disk's content after the simulated actions wrote it
)

// eventLogPath is the measured-boot event log under a machine's sysfs (the kernel's path).
const eventLogPath = "kernel/security/tpm0/binary_bios_measurements"

// disk is one block device of a simulated machine.
type disk struct{ dev, serial string }

// machineDisks are the machine's disks: the install disk with the serial the owner declares, a
// data disk, and for a machine built to be refused a second disk with the install disk's serial.
func machineDisks(d SeedDevice, i int) []disk {
	out := []disk{{"sda", diskSerial(i)}, {"sdb", fmt.Sprintf("FSIM%04dDATA", hostNumber(i))}}
	if d.DuplicateDisk {
		out = append(out, disk{"sdc", diskSerial(i)})
	}
	return out
}

// writeMachineFS writes the machine's fake sysfs and devfs: SMBIOS UUID and serial, a TPM 2.0,
// its network interface and MAC, its disks (device nodes as empty files, ATA by-id links, sysfs serials) and the firmware's
// event log, a recorded UEFI boot with Secure Boot enabled (RHEL 8), which swtpm replays into
// the PCRs at every power-on.
func writeMachineFS(dir string, smbiosUUID, smbiosSerial, mac string, disks []disk) error {
	sys, dev := filepath.Join(dir, MachineSysDir), filepath.Join(dir, MachineDevDir)
	files := map[string]string{
		filepath.Join(sys, "class/dmi/id/product_uuid"):          smbiosUUID + "\n",
		filepath.Join(sys, "class/dmi/id/product_serial"):        smbiosSerial + "\n",
		filepath.Join(sys, "class/dmi/id/sys_vendor"):            "fleetsim\n",
		filepath.Join(sys, "class/dmi/id/product_name"):          "simulated machine\n",
		filepath.Join(sys, "class/tpm/tpm0/tpm_version_major"):   "2\n",
		filepath.Join(sys, eventLogPath):                         string(eventlogs.RHEL8SecureBoot),
		filepath.Join(sys, nicAddressPath):                       mac + "\n",
		filepath.Join(dir, MachineDiskDir, ".simulated-install"): "what the simulated install actions wrote\n",
	}
	for _, d := range disks {
		files[filepath.Join(sys, "block", d.dev, "device/serial")] = d.serial + "\n"
		files[filepath.Join(dev, d.dev)] = ""
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("write machine files: %w", err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write machine files: %w", err)
		}
	}
	byID := filepath.Join(dev, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o700); err != nil {
		return fmt.Errorf("write machine files: %w", err)
	}
	for _, d := range disks {
		link := filepath.Join(byID, diskLinkName(d.dev, d.serial))
		if err := os.Symlink("../../"+d.dev, link); err != nil {
			return fmt.Errorf("write machine files: %w", err)
		}
	}
	return nil
}

// newSMBIOSUUID draws a random (version 4) UUID, lowercase as the agent reports it.
func newSMBIOSUUID(rnd io.Reader) (string, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return "", fmt.Errorf("draw an SMBIOS UUID: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// Package fakehw writes the parts of a machine's /sys and /dev that the agent reads (SMBIOS
// identity, the TPM version, whole disks and their serials), into a directory, so a simulated
// machine or a test runs the real agent code against them (`fleetd enroll --sysfs --devfs`).
package fakehw

import (
	"fmt"
	"os"
	"path/filepath"
)

// Machine describes the hardware to write.
type Machine struct {
	UUID     string // SMBIOS system UUID (class/dmi/id/product_uuid)
	Serial   string // SMBIOS system serial (class/dmi/id/product_serial)
	TPMMajor string // "2" for a TPM 2.0, "1" for a TPM 1.2 (class/tpm/tpm0/tpm_version_major)
	Disks    []Disk
}

// Disk is one whole disk: its kernel name, its serial and the by-id link udev would make.
type Disk struct {
	Dev    string // "nvme0n1", "sda"
	Serial string
	Model  string // e.g. "Samsung_SSD_980_1TB"; the link is <bus>-<model>_<serial>
	Bus    string // "nvme" or "ata"
}

// Link is the by-id name udev gives the disk.
func (d Disk) Link() string { return fmt.Sprintf("%s-%s_%s", d.Bus, d.Model, d.Serial) }

// Write creates root/sys and root/dev for the machine and returns their paths.
func Write(root string, m Machine) (sysRoot, devRoot string, err error) {
	sysRoot, devRoot = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	files := map[string]string{
		"class/dmi/id/product_uuid":        m.UUID + "\n",
		"class/dmi/id/product_serial":      m.Serial + "\n",
		"class/tpm/tpm0/tpm_version_major": m.TPMMajor + "\n",
	}
	byID := filepath.Join(devRoot, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o755); err != nil {
		return "", "", fmt.Errorf("write fake hardware: %w", err)
	}
	for _, d := range m.Disks {
		files["block/"+d.Dev+"/device/serial"] = d.Serial + "\n"
		// The device node itself: an empty file stands for the block device.
		if err := os.WriteFile(filepath.Join(devRoot, d.Dev), nil, 0o600); err != nil {
			return "", "", fmt.Errorf("write fake hardware: %w", err)
		}
		link := filepath.Join(byID, d.Link())
		if err := os.Symlink(filepath.Join("..", "..", d.Dev), link); err != nil && !os.IsExist(err) {
			return "", "", fmt.Errorf("write fake hardware: %w", err)
		}
	}
	for name, content := range files {
		p := filepath.Join(sysRoot, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", "", fmt.Errorf("write fake hardware: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", "", fmt.Errorf("write fake hardware: %w", err)
		}
	}
	return sysRoot, devRoot, nil
}

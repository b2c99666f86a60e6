package stack

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/folly-infra/fleetd/dev/swtpm"
)

// The parts of a simulated machine that its identity rests on (`fleetsim machine NAME
// set-uuid|replace-tpm`, docs/design.md §8): the mainboard's SMBIOS UUID, which fleetd's identity
// of the node was issued for (fleet_identity's uuid hash), and the TPM, whose EK NetBox declares
// (ek_sha256) and which holds the node's LAK and LDevID keys. As with hardware.go's changes,
// NetBox keeps the owner's declaration and stack.json what the machine was built with.

// smbiosUUIDPath is the SMBIOS system UUID under the machine's sysfs (the kernel's path).
var smbiosUUIDPath = filepath.Join("class", "dmi", "id", "product_uuid")

// MachineUUID is the machine's SMBIOS system UUID, as its firmware reports it now: the agent's
// claim and what Talos sends in its configuration URL. A machine directory without the file has
// the UUID it was built with.
func MachineUUID(m Machine) (string, error) {
	return sysValue(m, smbiosUUIDPath, m.SMBIOSUUID, "SMBIOS UUID")
}

// uuidForm is an SMBIOS UUID as the kernel prints product_uuid.
var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// SetSMBIOSUUID gives the machine another SMBIOS system UUID (a new mainboard, its disks and TPM
// moved over), uuid, or with "" a random one. The node's identity was issued for the old UUID:
// its next boot check claims the new one, and a Talos node's configuration fetch names it.
func SetSMBIOSUUID(info Info, name, uuid string) (HardwareChange, error) {
	mc, err := openMachine(info, name, "hardware", nil)
	if err != nil {
		return HardwareChange{}, err
	}
	defer mc.close()
	if uuid == "" {
		if uuid, err = newSMBIOSUUID(rand.Reader); err != nil {
			return HardwareChange{}, err
		}
	}
	uuid = strings.ToLower(uuid)
	if !uuidForm.MatchString(uuid) {
		return HardwareChange{}, fmt.Errorf("set-uuid %s: %q is no SMBIOS UUID (want 3f0c7a52-8d1e-4b7a-9c55-0c1d2e3f4a5b)", name, uuid)
	}
	before, err := MachineUUID(mc.m)
	if err != nil {
		return HardwareChange{}, err
	}
	return mc.replaceSysValue("set-uuid", smbiosUUIDPath, "SMBIOS UUID", before, uuid,
		fmt.Sprintf("the mainboard of %s was replaced: its SMBIOS UUID is %s, was %s; fleetd issued the node's identity for the old one", name, uuid, before))
}

// ReplaceTPM gives the machine a new TPM: a fresh swtpm with a new EK, its certificate from the
// stack's EK CA (a TPM of the same make). NetBox still declares the old EK's hash, and the node's
// LAK and LDevID keys stayed in the old TPM, so its boot checks fail until it is provisioned again;
// the change's Before and After are the old and new EK hashes (what the owner would approve).
func ReplaceTPM(ctx context.Context, info Info, name string) (HardwareChange, error) {
	mc, err := openMachine(info, name, "hardware", nil)
	if err != nil {
		return HardwareChange{}, err
	}
	defer mc.close()
	dir := mc.path(MachineTPMDir)
	old, err := swtpm.Read(dir)
	if err != nil {
		return HardwareChange{}, fmt.Errorf("replace-tpm %s: %w", name, err)
	}
	tpm, err := swtpm.Manufacture(ctx, dir, swtpm.Options{CADir: newPaths(info.Dir).ekCA, Overwrite: true})
	if err != nil {
		return HardwareChange{}, fmt.Errorf("replace-tpm %s: %w", name, err)
	}
	c := HardwareChange{Machine: name, Before: old.EKSHA256, After: tpm.EKSHA256,
		What: fmt.Sprintf("the TPM of %s was replaced: its EK's SHA-256 is %s, was %s; NetBox still declares the old one, and the node's keys were in the old TPM",
			name, tpm.EKSHA256, old.EKSHA256)}
	mc.say("%s", c.What)
	return c, nil
}

package stack

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Hardware changes of a simulated machine (`fleetsim machine NAME swap-disk|add-disk|set-mac`,
// docs/design.md §8): what a technician does to a real machine, made to its files only. NetBox
// keeps the owner's declaration, and with it Kea's reservation and Tinkerbell's Hardware keep the
// declared MAC: that is the point, since `fleetd inventory check` is the check that finds the
// machine and NetBox disagreeing. stack.json's machines keep what each machine was built with;
// the machine's files say what it is now.

// machineNIC is the simulated machine's one network interface (its MAC is sys/class/net/eth0/address).
const machineNIC = "eth0"

// nicAddressPath is the MAC of the machine's interface under its sysfs (the kernel's path).
var nicAddressPath = filepath.Join("class", "net", machineNIC, "address")

// HardwareChange is what a hardware change did.
type HardwareChange struct {
	Machine string
	What    string // one sentence: what changed, from what to what
	Before  string // the serial or MAC before ("" for a disk added)
	After   string
}

// MachineMAC is the MAC of the machine's network interface: its worker id when it netboots
// HookOS. A machine directory from before the interface file existed has the MAC it was built with.
func MachineMAC(m Machine) (string, error) { return sysValue(m, nicAddressPath, m.MAC, "MAC") }

// sysValue is the value of the machine's sysfs file rel (under MachineSysDir) as the kernel
// reports it now, what (e.g. "MAC") naming it in errors; built, what the machine was built with,
// when a machine directory from before the file existed lacks it.
func sysValue(m Machine, rel, built, what string) (string, error) {
	b, err := os.ReadFile(filepath.Join(m.Dir, MachineSysDir, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return built, nil
	}
	if err != nil {
		return "", fmt.Errorf("read the machine's %s: %w", what, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// replaceSysValue writes after into the machine's sysfs file rel in place of before, for
// `fleetsim machine NAME command` (set-mac, set-uuid), what naming the value ("MAC") and change
// saying what a technician did; the same value again is refused.
func (mc *machine) replaceSysValue(command, rel, what, before, after, change string) (HardwareChange, error) {
	if after == before {
		return HardwareChange{}, fmt.Errorf("%s %s: the machine's %s is %s already", command, mc.name, what, after)
	}
	if err := writeFile(mc.path(MachineSysDir, rel), after+"\n"); err != nil {
		return HardwareChange{}, fmt.Errorf("%s %s: %w", command, mc.name, err)
	}
	c := HardwareChange{Machine: mc.name, Before: before, After: after, What: change}
	mc.say("%s", c.What)
	return c, nil
}

// SetMAC gives the machine's network interface another MAC (a new network card), mac, or with ""
// a random locally administered one. NetBox, Kea's reservation and the Tinkerbell Hardware keep the
// declared MAC, so the machine's next netboot finds no Workflow for its new worker id.
func SetMAC(info Info, name, mac string) (HardwareChange, error) {
	mc, err := openMachine(info, name, "hardware", nil)
	if err != nil {
		return HardwareChange{}, err
	}
	defer mc.close()
	if mac == "" {
		if mac, err = randomMAC(rand.Reader); err != nil {
			return HardwareChange{}, err
		}
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return HardwareChange{}, fmt.Errorf("set-mac %s: %q is no Ethernet MAC (want 02:f6:00:00:00:01)", name, mac)
	}
	before, err := MachineMAC(mc.m)
	if err != nil {
		return HardwareChange{}, err
	}
	after := hw.String() // lowercase, colon-separated, as the kernel writes it
	return mc.replaceSysValue("set-mac", nicAddressPath, "MAC", before, after,
		fmt.Sprintf("the network card of %s was replaced: its MAC is %s, was %s; NetBox still declares the old one", name, after, before))
}

// SwapDisk replaces the machine's disk dev ("" is sda, the install disk) with a new one whose
// serial is serial, or with "" a random one. The new disk is blank, so the installed OS is gone
// with the old disk, unless clone (its content was copied onto the new disk: the node boots as
// before). NetBox keeps the declared disk_serial.
func SwapDisk(info Info, name, dev, serial string, clone bool) (HardwareChange, error) {
	mc, err := openMachine(info, name, "hardware", nil)
	if err != nil {
		return HardwareChange{}, err
	}
	defer mc.close()
	if dev == "" {
		dev = "sda"
	}
	if !slices.Contains(mc.disks(), dev) {
		return HardwareChange{}, fmt.Errorf("swap-disk %s: the machine has no disk %s (it has %s)", name, dev, strings.Join(mc.disks(), ", "))
	}
	if serial, err = newDiskSerial(serial); err != nil {
		return HardwareChange{}, fmt.Errorf("swap-disk %s: %w", name, err)
	}
	before := mc.blockSerial(dev)
	if serial == before {
		return HardwareChange{}, fmt.Errorf("swap-disk %s: disk %s has serial %s already", name, dev, serial)
	}
	installed := mc.hasPartitions(dev)
	if installed && !clone {
		if err := mc.erase(dev); err != nil {
			return HardwareChange{}, fmt.Errorf("swap-disk %s: %w", name, err)
		}
	}
	if err := mc.unlinkDisk(dev); err != nil {
		return HardwareChange{}, fmt.Errorf("swap-disk %s: %w", name, err)
	}
	if err := mc.linkDisk(dev, serial); err != nil {
		return HardwareChange{}, fmt.Errorf("swap-disk %s: %w", name, err)
	}
	c := HardwareChange{Machine: name, Before: before, After: serial,
		What: fmt.Sprintf("disk %s of %s was replaced: its serial is %s, was %s", dev, name, serial, before)}
	switch {
	case installed && clone:
		c.What += "; the old disk's content was copied onto it, so the node boots as before"
	case installed:
		c.What += "; the new disk is blank, so the installed OS is gone with the old one"
	}
	mc.say("%s", c.What)
	return c, nil
}

// AddDisk adds a blank disk with serial (or with "" a random one) to the machine: with the
// declared disk's serial, the agent finds that serial twice and fleetd refuses to choose.
func AddDisk(info Info, name, serial string) (HardwareChange, error) {
	mc, err := openMachine(info, name, "hardware", nil)
	if err != nil {
		return HardwareChange{}, err
	}
	defer mc.close()
	if serial, err = newDiskSerial(serial); err != nil {
		return HardwareChange{}, fmt.Errorf("add-disk %s: %w", name, err)
	}
	dev := ""
	for c := 'a'; c <= 'z' && dev == ""; c++ {
		if d := "sd" + string(c); !slices.Contains(mc.disks(), d) {
			dev = d
		}
	}
	if dev == "" {
		return HardwareChange{}, fmt.Errorf("add-disk %s: the machine has 26 disks already", name)
	}
	if err := writeFile(mc.path(MachineDevDir, dev), ""); err != nil {
		return HardwareChange{}, fmt.Errorf("add-disk %s: %w", name, err)
	}
	if err := mc.linkDisk(dev, serial); err != nil {
		return HardwareChange{}, fmt.Errorf("add-disk %s: %w", name, err)
	}
	c := HardwareChange{Machine: name, After: serial, What: fmt.Sprintf("a disk %s with serial %s was added to %s", dev, serial, name)}
	mc.say("%s", c.What)
	return c, nil
}

// disks are the machine's whole disks (sysfs block devices), sorted.
func (mc *machine) disks() []string {
	entries, _ := os.ReadDir(mc.path(MachineSysDir, "block"))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// hasPartitions reports whether an image was written to dev (writeImage made its partitions).
func (mc *machine) hasPartitions(dev string) bool {
	parts, _ := filepath.Glob(mc.path(MachineSysDir, "block", dev, dev+"[0-9]*"))
	return len(parts) > 0
}

// unlinkDisk removes the by-id links of dev (its whole disk and its partitions).
func (mc *machine) unlinkDisk(dev string) error {
	byID := mc.path(MachineDevDir, "disk", "by-id")
	entries, err := os.ReadDir(byID)
	if err != nil {
		return fmt.Errorf("list the machine's disks: %w", err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(byID, e.Name()))
		if err != nil {
			continue
		}
		if t := filepath.Base(target); strings.HasPrefix(t, dev) && strings.Trim(t[len(dev):], "0123456789") == "" {
			if err := os.Remove(filepath.Join(byID, e.Name())); err != nil {
				return fmt.Errorf("remove disk link %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// linkDisk gives dev its serial in sysfs and its ATA by-id link, as writeMachineFS does.
func (mc *machine) linkDisk(dev, serial string) error {
	if err := writeFile(mc.path(MachineSysDir, "block", dev, "device", "serial"), serial+"\n"); err != nil {
		return err
	}
	byID := mc.path(MachineDevDir, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o700); err != nil {
		return err
	}
	return os.Symlink("../../"+dev, filepath.Join(byID, diskLinkName(dev, serial)))
}

// diskLinkName is the by-id link of a simulated disk (udev's ata-MODEL_SERIAL).
func diskLinkName(dev, serial string) string { return "ata-FLEETSIM_DISK_" + dev + "_" + serial }

// diskSerialChars is what a disk serial given to fleetsim may hold: the characters of a by-id
// link's serial (udev replaces the others).
var diskSerialChars = regexp.MustCompile(`^[A-Za-z0-9.-]{1,40}$`)

// newDiskSerial is serial checked, or with "" a random one (SWAP + 8 hex digits).
func newDiskSerial(serial string) (string, error) {
	if serial == "" {
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("draw a disk serial: %w", err)
		}
		return fmt.Sprintf("SWAP%X", b), nil
	}
	if !diskSerialChars.MatchString(serial) {
		return "", fmt.Errorf("serial %q: want 1 to 40 letters, digits, '.' or '-'", serial)
	}
	return serial, nil
}

// randomMAC draws a locally administered unicast MAC (02:f6:…), outside the stack's 02:f5:… plan.
func randomMAC(rnd io.Reader) (string, error) {
	b := make([]byte, 4)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return "", fmt.Errorf("draw a MAC: %w", err)
	}
	return fmt.Sprintf("02:f6:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3]), nil
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

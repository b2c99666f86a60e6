package agent

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
)

// How the agent finds disks and their serials (the same rule as the example wipe action, so the
// agent and the wipe agree on which disk a serial names):
//
//   - Every symlink in DEV/disk/by-id names a block device: the last path element of its target
//     ("../../nvme0n1" is nvme0n1). Links to partitions ("-partN") and links named by WWN or EUI
//     (wwn-*, nvme-eui.*, nvme-nvme.*) are skipped.
//   - A link named BUS-MODEL_SERIAL (ata-, nvme-, scsi-, usb-, mmc-…) gives SERIAL, the text
//     after its last "_"; udev replaces spaces by "_", so a serial with spaces is found through
//     sysfs instead. virtio-SERIAL links give SERIAL.
//   - SYS/block/DEV/serial and SYS/block/DEV/device/serial (NVMe, virtio, some SCSI) give the
//     serial the device reports, trimmed.
//
// Each distinct (device, serial) pair is reported once, with the device's by-id path (the
// sorted-first link of the device whose name ends with the serial, else its sorted-first link).
// So a disk seen through several links is one disk, and two disks with one serial are two:
// fleetd then refuses to choose.

var partSuffix = regexp.MustCompile(`-part[0-9]+$`)

// readDisks lists the whole disks under devRoot/disk/by-id with their serials.
func readDisks(devRoot, sysRoot string) ([]api.Disk, error) {
	byID := filepath.Join(devRoot, "disk", "by-id")
	entries, err := os.ReadDir(byID)
	if err != nil {
		return nil, fmt.Errorf("list disks in %s: %w", byID, err)
	}
	links := map[string][]string{}   // device → by-id link names
	serials := map[string][]string{} // device → serial candidates
	for _, e := range entries {
		name := e.Name()
		if e.Type()&fs.ModeSymlink == 0 || partSuffix.MatchString(name) || skipLink(name) {
			continue
		}
		target, err := os.Readlink(filepath.Join(byID, name))
		if err != nil {
			return nil, fmt.Errorf("read disk link %s: %w", name, err)
		}
		dev := filepath.Base(target)
		links[dev] = append(links[dev], name)
		if s := serialFromLink(name); s != "" {
			serials[dev] = append(serials[dev], s)
		}
	}
	var out []api.Disk
	for dev, names := range links {
		sort.Strings(names)
		for _, s := range uniq(append(serials[dev], sysfsSerials(sysRoot, dev)...)) {
			out = append(out, api.Disk{Serial: s, Path: filepath.Join(byID, pickLink(names, s))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path+out[i].Serial < out[j].Path+out[j].Serial })
	return out, nil
}

func skipLink(name string) bool {
	for _, p := range []string{"wwn-", "nvme-eui.", "nvme-nvme.", "dm-", "md-", "lvm-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// serialFromLink returns the serial a by-id link name carries, or "".
func serialFromLink(name string) string {
	if s, ok := strings.CutPrefix(name, "virtio-"); ok {
		return s
	}
	bus, rest, ok := strings.Cut(name, "-")
	if !ok || bus == "" {
		return ""
	}
	i := strings.LastIndex(rest, "_")
	if i < 0 || i == len(rest)-1 {
		return ""
	}
	s := rest[i+1:]
	if bus == "usb" { // usb-Vendor_Model_SERIAL-0:0: the LUN follows the serial
		if j := strings.LastIndex(s, "-"); j > 0 {
			s = s[:j]
		}
	}
	return s
}

// sysfsSerials reads the serial files of a block device.
func sysfsSerials(sysRoot, dev string) []string {
	var out []string
	for _, p := range []string{"serial", "device/serial"} {
		b, err := os.ReadFile(filepath.Join(sysRoot, "block", dev, p))
		if s := strings.TrimSpace(string(b)); err == nil && s != "" {
			out = append(out, s)
		}
	}
	return out
}

func pickLink(names []string, serial string) string {
	for _, n := range names {
		if strings.HasSuffix(n, "_"+serial) || n == "virtio-"+serial {
			return n
		}
	}
	return names[0]
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// readSMBIOS reads the machine's SMBIOS UUID and serial from sysRoot/class/dmi/id. A missing
// file gives an empty value (some boards have no serial); fleetd decides whether that matters.
func readSMBIOS(sysRoot string) (api.SMBIOS, error) {
	dir := filepath.Join(sysRoot, "class", "dmi", "id")
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("read SMBIOS %s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	uuid, err := read("product_uuid")
	if err != nil {
		return api.SMBIOS{}, err
	}
	serial, err := read("product_serial")
	if err != nil {
		return api.SMBIOS{}, err
	}
	return api.SMBIOS{UUID: strings.ToLower(uuid), Serial: serial}, nil
}

// Hardware is where the agent reads what it claims of the machine besides its TPM (the SMBIOS
// identity, the disks, the MAC), the same for `fleetd enroll` and `fleetd boot-check`. Zero values
// take the defaults documented on each field.
type Hardware struct {
	SysRoot string // "" is /sys: dmi/id (SMBIOS), block (disk serials), class/net (MACs) (FLEETD_SYSFS)
	DevRoot string // "" is /dev: disk/by-id (FLEETD_DEVFS)
	// RouteFile is the kernel's IPv4 routing table, whose default route names the interface the
	// machine netbooted (HookOS) or boots from (an installed node); "" is /proc/net/route.
	RouteFile string
	// MAC, when set, is claimed as it is instead of the default route's interface's (FLEETD_MAC).
	MAC string
}

func (h Hardware) withDefaults() Hardware {
	if h.SysRoot == "" {
		h.SysRoot = "/sys"
	}
	if h.DevRoot == "" {
		h.DevRoot = "/dev"
	}
	if h.RouteFile == "" {
		h.RouteFile = "/proc/net/route"
	}
	return h
}

// readMAC is the MAC the agent claims: Hardware.MAC when set, else the address of the interface
// of the default route with the lowest metric (RouteFile, then SysRoot/class/net/IFACE/address).
// An error means the agent cannot tell; the caller claims no MAC then.
func (h Hardware) readMAC() (string, error) {
	if h.MAC != "" {
		return strings.ToLower(strings.TrimSpace(h.MAC)), nil
	}
	b, err := os.ReadFile(h.RouteFile)
	if err != nil {
		return h.onlyMAC(fmt.Errorf("read the routing table: %w", err))
	}
	iface, metric := "", -1
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line) // Iface Destination Gateway Flags RefCnt Use Metric Mask …
		if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		var m int
		if _, err := fmt.Sscan(f[6], &m); err == nil && (metric < 0 || m < metric) {
			iface, metric = f[0], m
		}
	}
	if iface == "" || strings.ContainsAny(iface, "/.") {
		return h.onlyMAC(fmt.Errorf("%s has no default route", h.RouteFile))
	}
	mac, err := os.ReadFile(filepath.Join(h.SysRoot, "class", "net", iface, "address"))
	if err != nil {
		return h.onlyMAC(fmt.Errorf("read the MAC of %s, the default route's interface: %w", iface, err))
	}
	return strings.ToLower(strings.TrimSpace(string(mac))), nil
}

// onlyMAC is the MAC of the machine's one interface besides lo when the default route does not
// name one (no route yet, or a sysfs root apart from the kernel's); else the error why.
func (h Hardware) onlyMAC(why error) (string, error) {
	entries, err := os.ReadDir(filepath.Join(h.SysRoot, "class", "net"))
	var names []string
	for _, e := range entries {
		if e.Name() != "lo" {
			names = append(names, e.Name())
		}
	}
	if err != nil || len(names) != 1 {
		return "", fmt.Errorf("%w, and the machine has %d interfaces besides lo", why, len(names))
	}
	mac, err := os.ReadFile(filepath.Join(h.SysRoot, "class", "net", names[0], "address"))
	if err != nil {
		return "", fmt.Errorf("%w, and the MAC of %s cannot be read: %w", why, names[0], err)
	}
	return strings.ToLower(strings.TrimSpace(string(mac))), nil
}

// claims reads what the agent claims of the machine: its SMBIOS identity, its disks and its MAC
// (empty, with a warning, when it cannot tell: the MAC is kept for the inventory check, it
// authorizes nothing).
func (h Hardware) claims(log zerolog.Logger) (api.BootCheckClaims, error) {
	h = h.withDefaults()
	var c api.BootCheckClaims
	var err error
	if c.SMBIOS, err = readSMBIOS(h.SysRoot); err != nil {
		return c, err
	}
	if c.Disks, err = readDisks(h.DevRoot, h.SysRoot); err != nil {
		return c, err
	}
	if c.MAC, err = h.readMAC(); err != nil {
		log.Warn().Err(err).Msg("the MAC this machine netbooted from is unknown; fleetd keeps none")
	}
	return c, nil
}

func (h *Hardware) addFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&h.SysRoot, "sysfs", getenv("FLEETD_SYSFS"), "sysfs root, /sys when empty (FLEETD_SYSFS)")
	fs.StringVar(&h.DevRoot, "devfs", getenv("FLEETD_DEVFS"), "device root, /dev when empty (FLEETD_DEVFS)")
	fs.StringVar(&h.MAC, "mac", getenv("FLEETD_MAC"), "the MAC to claim; the default route's interface's when empty (FLEETD_MAC)")
}

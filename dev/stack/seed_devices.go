package stack

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/folly-infra/fleetd/dev/netboxemu"
)

// Addressing of the simulated machines (docs/design.md §8): each machine's NetBox address is a loopback
// address of its own, 127.0.1.N/8 with N = index + 10, and it sends its requests from it, so
// fleetd's "the request comes from the device's address" check is real. Linux routes all of
// 127.0.0.0/8 to lo, so no setup is needed. The gateway 127.0.0.1 lies inside every machine's
// /8, which fleetd's renderer requires (seed.gateway).
var (
	Gateway   = netip.MustParseAddr("127.0.0.1")
	firstAddr = netip.MustParseAddr("127.0.1.0")
)

const addrBits = 8

// SeedDevice is one device of the example inventory: its declaration in NetBox and whether a
// simulated machine (a software TPM 2.0) stands behind it.
type SeedDevice struct {
	Name  string
	Class string
	// Faulty says what is wrong with the declaration; "" for a valid one.
	Faulty       string
	NoDiskSerial bool
	NoEK         bool // ek_sha256 stays empty (the machine's EK is not approved)
	NoMAC        bool
	TPM12        bool // declared tpm 1.2; such a machine has no swtpm (it is refused before anything runs)
	// DuplicateDisk gives the machine a second disk with the declared serial: the declaration
	// looks valid, and the enrollment must refuse to choose a disk.
	DuplicateDisk bool
	// ForeignEK declares the hash of another TPM's EK: the declaration looks valid, and the
	// enrollment must refuse the machine's own EK.
	ForeignEK bool
}

// Machine reports whether the device has a simulated machine: every TPM 2.0 device does.
func (d SeedDevice) Machine() bool { return !d.TPM12 }

// exampleSeed covers every class kind of examples/classes.json, the class worker-g2, and
// one faulty declaration per refusal a person should be able to see (docs/design.md §8).
var exampleSeed = []SeedDevice{
	{Name: "cp-1", Class: "talos-cp"},
	{Name: "worker-1", Class: "talos-worker"},
	{Name: "builder-1", Class: "nixos-builder"},
	{Name: "edge-1", Class: "alpine-edge"},
	{Name: "lab-1", Class: "ubuntu-lab"},
	{Name: "g2-1", Class: "worker-g2", TPM12: true, Faulty: "class worker-g2 is not installable; its TPM is 1.2"},
	{Name: "fault-no-disk-serial", Class: "talos-worker", NoDiskSerial: true, Faulty: "no disk_serial"},
	{Name: "fault-unknown-class", Class: "gpu-worker", Faulty: "fleet_class gpu-worker is not in classes.json"},
	{Name: "fault-no-ek", Class: "talos-worker", NoEK: true, Faulty: "no ek_sha256"},
	{Name: "fault-tpm12", Class: "talos-worker", TPM12: true, Faulty: "tpm 1.2"},
	{Name: "fault-no-mac", Class: "talos-worker", NoMAC: true, Faulty: "no MAC address"},
}

// SeedDevices is the example fleet NetBox is seeded with, followed by extra generated devices extra-001, extra-002, …
// (talos-worker, validly declared, each with a machine), then more (Options.MoreDevices).
func SeedDevices(extra int, more ...SeedDevice) []SeedDevice {
	out := append([]SeedDevice(nil), exampleSeed...)
	for i := 1; i <= extra; i++ {
		out = append(out, SeedDevice{Name: fmt.Sprintf("extra-%03d", i), Class: "talos-worker"})
	}
	return append(out, more...)
}

// hostNumber is N of the device at index i: its address, MAC and serials derive from it.
func hostNumber(i int) int { return i + 10 }

// address is the NetBox primary IPv4 of the device at index i: 127.0.1.N/8, continuing into
// 127.0.2.x and beyond past N = 255.
func address(i int) netip.Prefix {
	a := firstAddr.As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(hostNumber(i))
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), addrBits)
}

// mac is the device's locally administered MAC (02:f5:00:00:HH:LL from N).
func mac(i int) string {
	n := hostNumber(i)
	return fmt.Sprintf("02:f5:00:00:%02x:%02x", n>>8&0xff, n&0xff)
}

// diskSerial is the serial of the device's one install disk.
func diskSerial(i int) string { return fmt.Sprintf("FSIM%04dDISK", hostNumber(i)) }

func chassisSerial(i int) string { return fmt.Sprintf("FSIM-%04d", hostNumber(i)) }

// seed adds every device to the emulator (as the owner's OpenTofu would have declared them) and
// returns them with their machines for stack.json.
func seed(emu *netboxemu.Emulator, devices []SeedDevice, tpms map[string]machineTPM) ([]DeviceInfo, map[string]Machine, error) {
	infos := make([]DeviceInfo, 0, len(devices))
	machines := map[string]Machine{}
	for i, d := range devices {
		tpm, hasTPM := tpms[d.Name]
		cf := map[string]any{"fleet_class": d.Class}
		if !d.NoDiskSerial {
			cf["disk_serial"] = diskSerial(i)
		}
		switch {
		case d.ForeignEK:
			cf["ek_sha256"] = tpm.foreignEK
		case !d.NoEK:
			cf["ek_sha256"] = tpm.ekSHA256
		}
		if d.TPM12 {
			cf["tpm"] = "1.2"
		}
		iface := netboxemu.InterfaceSpec{Name: "eth0"}
		if !d.NoMAC {
			iface.MACs = []string{mac(i)}
		}
		id, err := emu.AddDevice(netboxemu.DeviceSpec{Name: d.Name, Serial: chassisSerial(i), DeviceType: "fleetsim-machine",
			Interfaces: []netboxemu.InterfaceSpec{iface}, PrimaryIPv4: address(i).String(), CustomFields: cf})
		if err != nil {
			return nil, nil, fmt.Errorf("seed device %s: %w", d.Name, err)
		}
		info := DeviceInfo{Name: d.Name, ID: id, Class: d.Class, Address: address(i).String(), Faulty: d.Faulty}
		if !d.NoMAC {
			info.MAC = mac(i)
		}
		infos = append(infos, info)
		if hasTPM && d.Machine() {
			m := Machine{Dir: tpm.machineDir, DeviceID: id, Address: address(i).String(), DiskSerial: diskSerial(i),
				EKSHA256: tpm.ekSHA256, SMBIOSUUID: tpm.uuid, SMBIOSSerial: chassisSerial(i)}
			if !d.NoMAC {
				m.MAC = mac(i)
			}
			machines[d.Name] = m
		}
	}
	return infos, machines, nil
}

// talosEndpoint is the cluster endpoint the Talos configs name: the first talos-cp device.
func talosEndpoint(devices []SeedDevice) string {
	for i, d := range devices {
		if strings.HasPrefix(d.Class, "talos-cp") {
			return "https://" + address(i).Addr().String() + ":6443"
		}
	}
	return "https://" + address(0).Addr().String() + ":6443"
}

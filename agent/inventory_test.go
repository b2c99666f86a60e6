package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/api"
)

// TestReadDisks checks the disk rule on a tree shaped like udev's: one disk per device and serial,
// partitions and WWN/EUI links left out, serials from link names and from sysfs.
func TestReadDisks(t *testing.T) {
	root := t.TempDir()
	dev, sys := filepath.Join(root, "dev"), filepath.Join(root, "sys")
	byID := filepath.Join(dev, "disk", "by-id")
	links := map[string]string{
		"ata-WDC_WD40EFRX-68N32N0_WD-WCC4N7XYZ":       "../../sda",
		"scsi-SATA_WDC_WD40EFRX-68N_WD-WCC4N7XYZ":     "../../sda", // the same disk through SCSI
		"ata-WDC_WD40EFRX-68N32N0_WD-WCC4N7XYZ-part1": "../../sda1",
		"wwn-0x50014ee2b5b5c5d5":                      "../../sda",
		"nvme-Samsung_SSD_970_EVO_1TB_S3Z9NB0K123456": "../../nvme0n1",
		"nvme-eui.0025385b71b07e2f":                   "../../nvme0n1",
		"virtio-QM00001":                              "../../vda",
		"usb-Generic_Flash_Disk_ABCDEF12-0:0":         "../../sdb",
		"ata-Cheap_SSD_WITH_SPACE":                    "../../sdc", // udev turned "WITH SPACE" into WITH_SPACE
		"ata-Clone_SSD_S3Z9NB0K123456":                "../../sdd", // a second disk claiming the NVMe's serial
	}
	if err := os.MkdirAll(byID, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(byID, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, serial := range map[string]string{"vda/serial": "QM00001\n", "sdc/device/serial": "  WITH SPACE  \n"} {
		p := filepath.Join(sys, "block", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(serial), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readDisks(dev, sys)
	if err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(byID, name) }
	want := []api.Disk{
		{Serial: "SPACE", Path: p("ata-Cheap_SSD_WITH_SPACE")},
		{Serial: "WITH SPACE", Path: p("ata-Cheap_SSD_WITH_SPACE")},
		{Serial: "S3Z9NB0K123456", Path: p("ata-Clone_SSD_S3Z9NB0K123456")},
		{Serial: "WD-WCC4N7XYZ", Path: p("ata-WDC_WD40EFRX-68N32N0_WD-WCC4N7XYZ")},
		{Serial: "S3Z9NB0K123456", Path: p("nvme-Samsung_SSD_970_EVO_1TB_S3Z9NB0K123456")},
		{Serial: "ABCDEF12", Path: p("usb-Generic_Flash_Disk_ABCDEF12-0:0")},
		{Serial: "QM00001", Path: p("virtio-QM00001")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readDisks (-want +got):\n%s", diff)
	}
	if _, err := readDisks(filepath.Join(root, "nodev"), sys); err == nil {
		t.Error("readDisks without a by-id directory succeeded")
	}
}

// TestReadSMBIOS checks that the UUID is normalised and a missing serial is empty.
func TestReadSMBIOS(t *testing.T) {
	sys := t.TempDir()
	dir := filepath.Join(sys, "class", "dmi", "id")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "product_uuid"), []byte("4C4C4544-0042-3510-8051-B4C04F4A3232\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readSMBIOS(sys)
	if err != nil || got != (api.SMBIOS{UUID: "4c4c4544-0042-3510-8051-b4c04f4a3232"}) {
		t.Errorf("readSMBIOS = %+v, %v", got, err)
	}
}

// TestReadMAC: the claimed MAC is the default route's interface's (the lowest metric), or the
// one set; a machine with no default route claims none, with the reason.
func TestReadMAC(t *testing.T) {
	dir := t.TempDir()
	route := filepath.Join(dir, "route")
	writeTestFile(t, route, "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"+
		"eth1\t00000000\t0101A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"+
		"eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"+
		"eth0\t0000A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n")
	writeTestFile(t, filepath.Join(dir, "sys/class/net/eth0/address"), "52:54:00:AB:CD:EF\n")
	writeTestFile(t, filepath.Join(dir, "sys/class/net/eth1/address"), "52:54:00:00:00:01\n")
	h := Hardware{SysRoot: filepath.Join(dir, "sys"), RouteFile: route}
	if mac, err := h.readMAC(); err != nil || mac != "52:54:00:ab:cd:ef" {
		t.Errorf("readMAC = %q, %v; want eth0's, lowercase", mac, err)
	}
	h.MAC = "52:54:00:00:00:02"
	if mac, err := h.readMAC(); err != nil || mac != "52:54:00:00:00:02" {
		t.Errorf("readMAC with FLEETD_MAC = %q, %v", mac, err)
	}
	writeTestFile(t, route, "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n")
	if mac, err := (Hardware{SysRoot: h.SysRoot, RouteFile: route}).readMAC(); err == nil || !strings.Contains(err.Error(), "no default route, and the machine has 2 interfaces") {
		t.Errorf("readMAC without a default route, two interfaces = %q, %v; want the reason", mac, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "sys/class/net/eth1")); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(dir, "sys/class/net/lo/address"), "00:00:00:00:00:00\n")
	if mac, err := (Hardware{SysRoot: h.SysRoot, RouteFile: route}).readMAC(); err != nil || mac != "52:54:00:ab:cd:ef" {
		t.Errorf("readMAC without a default route, one interface = %q, %v; want its MAC", mac, err)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

package attest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/attest"
)

// TestMatchDisk checks the rule that protects data (docs/design.md §1): exactly one disk with the declared
// serial, compared trimmed and case-sensitively. A device with no declared serial authorizes no
// disk, not even one that reports no serial either (a virtual disk often has none). A refusal
// lists at most 8 of the machine's serials.
func TestMatchDisk(t *testing.T) {
	nvme := attest.Disk{Serial: "S3Z9NB0K123456", Path: "/dev/disk/by-id/nvme-Samsung_SSD_970_S3Z9NB0K123456"}
	sata := attest.Disk{Serial: "WD-WCC4N7XYZ", Path: "/dev/disk/by-id/ata-WDC_WD40EFRX_WD-WCC4N7XYZ"}
	noSerial := attest.Disk{Serial: "", Path: "/dev/disk/by-id/virtio-0"}
	var nine []attest.Disk
	for i := range 9 {
		nine = append(nine, attest.Disk{Serial: fmt.Sprintf("SN%d", i), Path: fmt.Sprintf("/dev/disk/by-id/ata-SN%d", i)})
	}
	tests := []struct {
		name     string
		declared string
		disks    []attest.Disk
		want     attest.Check
		wantPath string
		wantMsg  string // a part of the refusal's message
	}{
		{"ok/one-of-two", "S3Z9NB0K123456", []attest.Disk{sata, nvme}, "", nvme.Path, ""},
		{"ok/one-of-two, another without a serial", "S3Z9NB0K123456", []attest.Disk{noSerial, nvme}, "", nvme.Path, ""},
		{"ok/trimmed", "  WD-WCC4N7XYZ\n", []attest.Disk{{Serial: "WD-WCC4N7XYZ  ", Path: sata.Path}}, "", sata.Path, ""},
		{"refuse/other-case", "s3z9nb0k123456", []attest.Disk{nvme}, attest.CheckDiskAbsent, "", ""},
		{"refuse/absent", "S3Z9NB0K123456", []attest.Disk{sata}, attest.CheckDiskAbsent, "", `the machine has 1 disks (serials "WD-WCC4N7XYZ")`},
		{"refuse/no-disks", "S3Z9NB0K123456", nil, attest.CheckDiskAbsent, "", ""},
		{"refuse/nothing-declared", " ", []attest.Disk{nvme}, attest.CheckDiskAbsent, "", "no declared disk_serial"},
		{"refuse/nothing-declared, a disk without a serial", "", []attest.Disk{noSerial}, attest.CheckDiskAbsent, "", "no declared disk_serial"},
		{"refuse/nothing-declared, a disk whose serial is blanks", " ", []attest.Disk{{Serial: "  ", Path: noSerial.Path}}, attest.CheckDiskAbsent, "", "no declared disk_serial"},
		{"refuse/absent among nine: eight serials listed", "S3Z9NB0K123456", nine, attest.CheckDiskAbsent, "",
			`the machine has 9 disks (serials "SN0", "SN1", "SN2", "SN3", "SN4", "SN5", "SN6", "SN7")`},
		{"refuse/twice", "S3Z9NB0K123456", []attest.Disk{nvme, sata, {Serial: nvme.Serial, Path: "/dev/disk/by-id/usb-X_S3Z9NB0K123456"}}, attest.CheckDiskAmbiguous, "",
			"2 disks have the declared serial"},
		{"refuse/relative-path", "S3Z9NB0K123456", []attest.Disk{{Serial: nvme.Serial, Path: "disk/by-id/x"}}, attest.CheckDiskMalformed, "", ""},
		{"refuse/path-with-dots", "S3Z9NB0K123456", []attest.Disk{{Serial: nvme.Serial, Path: "/dev/disk/by-id/../../sda"}}, attest.CheckDiskMalformed, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := attest.MatchDisk(tc.declared, tc.disks)
			if tc.want == "" {
				if err != nil || d.Path != tc.wantPath {
					t.Fatalf("MatchDisk = %+v, %v; want %s", d, err, tc.wantPath)
				}
				return
			}
			if r, ok := attest.AsRefusal(err); !ok || r.Check != tc.want || !strings.Contains(r.Msg, tc.wantMsg) || d != nil {
				t.Errorf("MatchDisk = %+v, %v; want a %s refusal with %q", d, err, tc.want, tc.wantMsg)
			}
		})
	}
}

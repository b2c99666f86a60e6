package attest_test

import (
	"testing"

	"github.com/folly-infra/fleetd/attest"
)

// TestMatchDisk checks the rule that protects data (docs/design.md §1): exactly one disk with the declared
// serial, compared trimmed and case-sensitively.
func TestMatchDisk(t *testing.T) {
	nvme := attest.Disk{Serial: "S3Z9NB0K123456", Path: "/dev/disk/by-id/nvme-Samsung_SSD_970_S3Z9NB0K123456"}
	sata := attest.Disk{Serial: "WD-WCC4N7XYZ", Path: "/dev/disk/by-id/ata-WDC_WD40EFRX_WD-WCC4N7XYZ"}
	tests := []struct {
		name     string
		declared string
		disks    []attest.Disk
		want     attest.Check
		wantPath string
	}{
		{"ok/one-of-two", "S3Z9NB0K123456", []attest.Disk{sata, nvme}, "", nvme.Path},
		{"ok/trimmed", "  WD-WCC4N7XYZ\n", []attest.Disk{{Serial: "WD-WCC4N7XYZ  ", Path: sata.Path}}, "", sata.Path},
		{"refuse/other-case", "s3z9nb0k123456", []attest.Disk{nvme}, attest.CheckDiskAbsent, ""},
		{"refuse/absent", "S3Z9NB0K123456", []attest.Disk{sata}, attest.CheckDiskAbsent, ""},
		{"refuse/no-disks", "S3Z9NB0K123456", nil, attest.CheckDiskAbsent, ""},
		{"refuse/nothing-declared", " ", []attest.Disk{nvme}, attest.CheckDiskAbsent, ""},
		{"refuse/twice", "S3Z9NB0K123456", []attest.Disk{nvme, sata, {Serial: nvme.Serial, Path: "/dev/disk/by-id/usb-X_S3Z9NB0K123456"}}, attest.CheckDiskAmbiguous, ""},
		{"refuse/relative-path", "S3Z9NB0K123456", []attest.Disk{{Serial: nvme.Serial, Path: "disk/by-id/x"}}, attest.CheckDiskMalformed, ""},
		{"refuse/path-with-dots", "S3Z9NB0K123456", []attest.Disk{{Serial: nvme.Serial, Path: "/dev/disk/by-id/../../sda"}}, attest.CheckDiskMalformed, ""},
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
			if r, ok := attest.AsRefusal(err); !ok || r.Check != tc.want {
				t.Errorf("err = %v, want a %s refusal", err, tc.want)
			}
		})
	}
}

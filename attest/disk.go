package attest

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Disk is a disk the agent found: its serial and its /dev/disk/by-id path.
type Disk struct {
	Serial string
	Path   string
}

// VerifiedDisk is the one disk whose serial is the declared disk_serial: the disk that may be wiped.
type VerifiedDisk struct {
	Serial string
	Path   string
}

// maxListed bounds how many disks a refusal lists.
const maxListed = 8

// MatchDisk finds the declared disk among the disks a machine reports (docs/design.md §1 limits: exactly
// one disk with the declared serial). Serials are compared after trimming surrounding
// whitespace, and case-sensitively: a serial is an identifier, and the owner declares it as the
// machine's tools print it (lsblk -o SERIAL, the /dev/disk/by-id name).
func MatchDisk(declaredSerial string, claimed []Disk) (*VerifiedDisk, error) {
	want := strings.TrimSpace(declaredSerial)
	if want == "" {
		return nil, refuse(CheckDiskAbsent, "the device has no declared disk_serial, so no disk may be wiped")
	}
	var found []Disk
	var seen []string
	for _, d := range claimed {
		if !filepath.IsAbs(d.Path) || strings.ContainsAny(d.Path, "\x00\n") || filepath.Clean(d.Path) != d.Path {
			return nil, refuse(CheckDiskMalformed, "the disk path %q is not a clean absolute path", d.Path)
		}
		if strings.TrimSpace(d.Serial) == want {
			found = append(found, d)
		}
		if len(seen) < maxListed {
			seen = append(seen, fmt.Sprintf("%q", strings.TrimSpace(d.Serial)))
		}
	}
	switch len(found) {
	case 1:
		return &VerifiedDisk{Serial: want, Path: found[0].Path}, nil
	case 0:
		return nil, refuse(CheckDiskAbsent, "no disk has the declared serial %q; the machine has %d disks (serials %s)",
			want, len(claimed), strings.Join(seen, ", "))
	default:
		paths := make([]string, len(found))
		for i, d := range found {
			paths[i] = d.Path
		}
		return nil, refuse(CheckDiskAmbiguous, "%d disks have the declared serial %q (%s); fleetd wipes only a disk it can tell apart",
			len(found), want, strings.Join(paths, ", "))
	}
}

package exampletemplates_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWipeDiskSelectsBySerial runs the wipe-disk action (DRY_RUN) against fake machines: it
// must find exactly one disk with the declared serial, agree with the agent's /workflow/disk,
// and fail loudly, erasing nothing, otherwise (docs/design.md §1 limits, §3).
func TestWipeDiskSelectsBySerial(t *testing.T) {
	wipe := find(t, scripts(t), "wipe", "wipe-disk")
	tests := []struct {
		name  string
		setup func(t *testing.T, m machine)
		env   map[string]string
		want  string // output for ok/, error text for refuse/
		disk  string // the device fleetd-disk must point to, for ok/
	}{
		{name: "ok/nvme-by-id-and-sysfs", setup: func(t *testing.T, m machine) {
			m.disk(t, "nvme0n1", serial, "nvme-Samsung_SSD_980_PRO_1TB_"+serial, "device/serial")
			m.disk(t, "sda", "WD-OTHER", "ata-WDC_WD10_WD-OTHER", "device/serial")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "disk/by-id/nvme-Samsung_SSD_980_PRO_1TB_"+serial)+"\n")
		}, want: "would erase DEV/nvme0n1 (serial " + serial + ")", disk: "nvme0n1"},
		{name: "ok/virtio-sysfs-only", setup: func(t *testing.T, m machine) {
			m.disk(t, "vda", serial, "", "serial")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "vda")+"\n")
		}, want: "would erase DEV/vda", disk: "vda"},
		{name: "refuse/no-disk-with-serial", setup: func(t *testing.T, m machine) {
			m.disk(t, "sda", "WD-OTHER", "ata-WDC_WD10_WD-OTHER", "device/serial")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "sda"))
		}, want: "no disk has serial " + serial + "; nothing erased"},
		{name: "refuse/two-disks-with-serial", setup: func(t *testing.T, m machine) {
			m.disk(t, "sda", serial, "ata-A_"+serial, "device/serial")
			m.disk(t, "sdb", serial, "ata-B_"+serial, "device/serial")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "sda"))
		}, want: "2 disks have serial " + serial + " (sda sdb); refusing to choose, nothing erased"},
		{name: "refuse/agent-resolved-another-disk", setup: func(t *testing.T, m machine) {
			m.disk(t, "nvme0n1", serial, "nvme-X_"+serial, "device/serial")
			m.disk(t, "sda", "WD-OTHER", "", "device/serial")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "sda"))
		}, want: "the agent resolved DEV/sda but serial " + serial + " is DEV/nvme0n1; nothing erased"},
		{name: "refuse/agent-authorized-no-disk", setup: func(t *testing.T, m machine) {
			m.disk(t, "nvme0n1", serial, "nvme-X_"+serial, "device/serial")
		}, want: "/disk is missing: the fleetd agent authorized no disk; nothing erased"},
		{name: "refuse/no-declared-serial", setup: func(t *testing.T, m machine) {
			m.disk(t, "nvme0n1", serial, "nvme-X_"+serial, "device/serial")
		}, env: map[string]string{"DISK_SERIAL": ""}, want: "DISK_SERIAL is empty: the device declares no disk serial; nothing erased"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			tc.setup(t, m)
			out, err := m.run(wipe, tc.env)
			out = strings.ReplaceAll(out, m.dev, "DEV")
			link, linkErr := os.Readlink(filepath.Join(m.dev, "fleetd-disk"))
			if strings.HasPrefix(tc.name, "refuse/") {
				if err == nil || !strings.Contains(out, tc.want) {
					t.Errorf("wipe-disk: %v, output %q; want failure saying %q", err, out, tc.want)
				}
				if linkErr == nil {
					t.Errorf("refused wipe-disk linked fleetd-disk to %s", link)
				}
				return
			}
			if err != nil || !strings.Contains(out, tc.want) {
				t.Errorf("wipe-disk: %v, output %q; want %q", err, out, tc.want)
			}
			if link != filepath.Join(m.dev, tc.disk) {
				t.Errorf("fleetd-disk links to %q (%v), want %s", link, linkErr, tc.disk)
			}
		})
	}
}

// TestNoCloudSeedFindsItsInputs runs write-nocloud-seed (DRY_RUN) up to the fetch: the root
// partition of the selected disk, and the machine's SMBIOS UUID, lowercased as the agent reports it.
func TestNoCloudSeedFindsItsInputs(t *testing.T) {
	seed := find(t, scripts(t), "cloud-init-nocloud-provision", "write-nocloud-seed")
	const uuid = "4c4c4544-0051-3510-8057-b4c04f4d4e32"
	disk := func(t *testing.T, m machine) {
		write(t, filepath.Join(m.dev, "nvme0n1"), "")
		write(t, filepath.Join(m.sys, "block/nvme0n1/nvme0n1p1/partition"), "1\n")
		write(t, filepath.Join(m.sys, "block/nvme0n1/nvme0n1p2/partition"), "2\n")
		if err := os.Symlink(filepath.Join(m.dev, "nvme0n1"), filepath.Join(m.dev, "fleetd-disk")); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, m machine)
		want  string
	}{
		{name: "ok/root-partition-uuid-and-fetch-secret", setup: func(t *testing.T, m machine) {
			disk(t, m)
			write(t, filepath.Join(m.sys, "class/dmi/id/product_uuid"), strings.ToUpper(uuid)+"\n")
			write(t, filepath.Join(m.wf, "fetch-secret"), "s3cr3t\n")
		}, want: "would fetch https://spore.folly:8443/v1/config/nocloud.tar?uuid=" + uuid + " with the fetch secret into /var/lib/cloud/seed/nocloud on DEV/nvme0n1p1"},
		{name: "refuse/no-fetch-secret", setup: func(t *testing.T, m machine) {
			disk(t, m)
			write(t, filepath.Join(m.sys, "class/dmi/id/product_uuid"), uuid)
		}, want: "fetch-secret is missing: the fleetd agent handed over no fetch secret"},
		{name: "refuse/no-uuid", setup: disk, want: "product_uuid is unreadable: the SMBIOS UUID fleetd attested cannot be read"},
		{name: "refuse/not-a-uuid", setup: func(t *testing.T, m machine) {
			disk(t, m)
			write(t, filepath.Join(m.sys, "class/dmi/id/product_uuid"), "x&y=z")
		}, want: "holds 'x&y=z', not a UUID"},
		{name: "refuse/no-selected-disk", setup: func(t *testing.T, m machine) {
			write(t, filepath.Join(m.sys, "class/dmi/id/product_uuid"), uuid)
		}, want: "fleetd-disk is missing: wipe-disk did not select the disk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			tc.setup(t, m)
			out, err := m.run(seed, nil)
			out = strings.ReplaceAll(out, m.dev, "DEV")
			failed := err != nil
			if failed != strings.HasPrefix(tc.name, "refuse/") || !strings.Contains(out, tc.want) {
				t.Errorf("write-nocloud-seed: %v, output %q; want %q", err, out, tc.want)
			}
		})
	}
}

// TestFetchSecretIntoImage runs write-fetch-secret (DRY_RUN) up to the write: the root partition
// of the selected disk and the agent's fetch secret; without the secret it fails before anything
// is mounted (issue 11.4).
func TestFetchSecretIntoImage(t *testing.T) {
	action := find(t, scripts(t), "alpine-image-provision", "write-fetch-secret")
	disk := func(t *testing.T, m machine) {
		write(t, filepath.Join(m.dev, "sda"), "")
		write(t, filepath.Join(m.sys, "block/sda/sda1/partition"), "1\n")
		write(t, filepath.Join(m.sys, "block/sda/sda2/partition"), "2\n")
		if err := os.Symlink(filepath.Join(m.dev, "sda"), filepath.Join(m.dev, "fleetd-disk")); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, m machine)
		want  string
	}{
		{name: "ok/root-partition-and-secret", setup: func(t *testing.T, m machine) {
			disk(t, m)
			write(t, filepath.Join(m.wf, "fetch-secret"), "s3cr3t\n")
		}, want: "would write the fetch secret to /var/lib/fleetd-node/fetch-secret on DEV/sda2"},
		{name: "refuse/no-fetch-secret", setup: disk, want: "fetch-secret is missing: the fleetd agent handed over no fetch secret"},
		{name: "refuse/no-selected-disk", setup: func(t *testing.T, m machine) {
			write(t, filepath.Join(m.wf, "fetch-secret"), "s3cr3t\n")
		}, want: "fleetd-disk is missing: wipe-disk did not select the disk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			tc.setup(t, m)
			out, err := m.run(action, nil)
			out = strings.ReplaceAll(out, m.dev, "DEV")
			failed := err != nil
			if failed != strings.HasPrefix(tc.name, "refuse/") || !strings.Contains(out, tc.want) || strings.Contains(out, "s3cr3t") {
				t.Errorf("write-fetch-secret: %v, output %q; want %q and never the secret", err, out, tc.want)
			}
		})
	}
}

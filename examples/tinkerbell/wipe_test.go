package exampletemplates_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// TestWipeDiskSelectsBySerial runs the wipe-disk action (DRY_RUN) against fake machines: it
// must find exactly one disk with the declared serial, agree with the agent's disk file in the
// request's shared directory,
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
// is mounted (docs/security.md, "The configuration fetch").
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

// TestWipeDiskReports runs wipe-disk for real against fake wipefs and blkdiscard (each logs its
// arguments; blkdiscard fails when the row says the disk cannot discard): after the erase it
// reports, in wipe-result of the shared directory, the serial, the method, erased and the bytes
// the method covered, which the receipt step quotes (docs/http.md, "Wipe receipts"); a dry run or
// a failed erase reports nothing.
func TestWipeDiskReports(t *testing.T) {
	wipe := find(t, scripts(t), "wipe", "wipe-disk")
	const sectors = 1953525168 // a 1 TB NVMe disk, in 512-byte sectors
	tests := []struct {
		name      string
		env       map[string]string
		noDiscard bool // blkdiscard fails
		wipefsErr bool // wipefs fails
		report    string
		calls     string
	}{
		{name: "ok/discarded: the whole disk", report: fmt.Sprintf("serial=%s\nmethod=blkdiscard\nresult=erased\nbytes=%d\n", serial, sectors*512),
			calls: "wipefs -af DEV/nvme0n1p1\nwipefs -af DEV/nvme0n1\nblkdiscard -f DEV/nvme0n1\n"},
		{name: "ok/no discard: its signatures only", noDiscard: true, report: "serial=" + serial + "\nmethod=wipefs\nresult=erased\nbytes=0\n",
			calls: "wipefs -af DEV/nvme0n1p1\nwipefs -af DEV/nvme0n1\nblkdiscard -f DEV/nvme0n1\n"},
		{name: "ok/discard turned off", env: map[string]string{"DISCARD": "false"}, report: "serial=" + serial + "\nmethod=wipefs\nresult=erased\nbytes=0\n",
			calls: "wipefs -af DEV/nvme0n1p1\nwipefs -af DEV/nvme0n1\n"},
		{name: "refuse/dry run: nothing erased, nothing reported", env: map[string]string{"DRY_RUN": "1"}},
		{name: "refuse/wipefs fails: no report", wipefsErr: true, calls: "wipefs -af DEV/nvme0n1p1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			m.disk(t, "nvme0n1", serial, "nvme-Samsung_SSD_980_PRO_1TB_"+serial, "device/serial")
			write(t, filepath.Join(m.sys, "block/nvme0n1/size"), fmt.Sprintf("%d\n", sectors))
			write(t, filepath.Join(m.sys, "block/nvme0n1/nvme0n1p1/partition"), "1\n")
			write(t, filepath.Join(m.wf, "disk"), filepath.Join(m.dev, "disk/by-id/nvme-Samsung_SSD_980_PRO_1TB_"+serial)+"\n")
			bin, calls := t.TempDir(), filepath.Join(t.TempDir(), "calls")
			for name, fails := range map[string]bool{"wipefs": tc.wipefsErr, "blkdiscard": tc.noDiscard} {
				exit := 0
				if fails {
					exit = 1
				}
				write(t, filepath.Join(bin, name), fmt.Sprintf("#!/bin/sh\necho %s \"$@\" >>%s\nexit %d\n", name, calls, exit))
				if err := os.Chmod(filepath.Join(bin, name), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"DRY_RUN": "", "PATH": bin + ":" + os.Getenv("PATH")}
			for k, v := range tc.env {
				env[k] = v
			}
			out, err := m.run(wipe, env)
			report, rerr := os.ReadFile(filepath.Join(m.wf, "wipe-result"))
			ran, _ := os.ReadFile(calls)
			if got := strings.ReplaceAll(string(ran), m.dev, "DEV"); got != tc.calls {
				t.Errorf("ran:\n%s\nwant:\n%s", got, tc.calls)
			}
			if tc.report == "" {
				if rerr == nil {
					t.Errorf("wipe-result written: %q (output %q)", report, out)
				}
				return
			}
			if err != nil || string(report) != tc.report {
				t.Errorf("wipe-disk: %v, output %q; wipe-result %q (%v), want %q", err, out, report, rerr, tc.report)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(m.wf, "wipe-result.*")); len(leftovers) != 0 {
				t.Errorf("temporary report files left: %v", leftovers)
			}
		})
	}
}

// TestWipeReceiptStep: the example wipe and retirement Templates carry the receipt step, and
// fleetd check names what to add to one without it (docs/operate.md, "The wipe receipt step").
func TestWipeReceiptStep(t *testing.T) {
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil {
		t.Fatal(err)
	}
	rendered := map[string]workflows.Rendered{}
	for _, tpl := range tpls {
		if rendered[tpl.Name], err = workflows.RenderTemplate(workflows.DefaultVersion, *tpl.Spec.Data, exampleHardwareMap(), nil); err != nil {
			t.Fatal(err)
		}
	}
	// variant is a rendered Template whose actions edit changed (or dropped: keep false).
	variant := func(name string, edit func(a tinkv1.Action) (_ tinkv1.Action, keep bool)) workflows.Rendered {
		r := rendered[name]
		task := r.Tasks[0]
		var actions []tinkv1.Action
		for _, a := range task.Actions {
			if a, keep := edit(a); keep {
				actions = append(actions, a)
			}
		}
		task.Actions = actions
		r.Tasks = []tinkv1.Task{task}
		return r
	}
	drop := func(a tinkv1.Action) (tinkv1.Action, bool) { return a, a.Name != "wipe-receipt" }
	misspell := func(a tinkv1.Action) (tinkv1.Action, bool) {
		if a.Name == "wipe-receipt" {
			a.Environment = map[string]string{"FLEETD_ACTION": "wipe_receipt"}
		}
		return a, true
	}
	for _, tc := range []struct {
		name   string
		tpl    string
		r      workflows.Rendered
		action fleet.Action
		refuse bool
	}{
		{name: "ok/wipe", tpl: "wipe", r: rendered["wipe"], action: fleet.ActionWipe},
		{name: "ok/retire", tpl: "retire", r: rendered["retire"], action: fleet.ActionRetire},
		{name: "ok/a provision erases without a receipt", tpl: "talos-provision", r: rendered["talos-provision"], action: fleet.ActionProvision},
		{name: "refuse/a wipe without the receipt step", tpl: "wipe", r: variant("wipe", drop), action: fleet.ActionWipe, refuse: true},
		{name: "refuse/a retirement without the receipt step", tpl: "retire", r: variant("retire", drop), action: fleet.ActionRetire, refuse: true},
		{name: "refuse/a misspelt receipt step", tpl: "wipe", r: variant("wipe", misspell), action: fleet.ActionWipe, refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := workflows.CheckWipeReceipt(tc.tpl, tc.r, tc.action)
			if !tc.refuse {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			want := "add right after the erase, which must report to wipe-result in the shared directory, the action {name: wipe-receipt, image: ghcr.io/folly-infra/fleetd-agent:v0.1.0, timeout: 120, environment: {FLEETD_ACTION: wipe-receipt}}"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "records it unconfirmed") {
				t.Errorf("got %v, want a refusal saying %q", err, want)
			}
		})
	}
}

// TestWipeReceiptSharedDir: the receipt step reads the grant the agent kept and the erase's
// wipe-result from the request's shared directory (FLEETD_WORKFLOW_DIR), so fleetd's Template
// check, for either Tinkerbell version, passes the example wipe and retirement Templates, whose
// task declares it for every action, and refuses one whose receipt step reads another directory
// (docs/operate.md, "Tinkerbell").
func TestWipeReceiptSharedDir(t *testing.T) {
	tpls, err := tinkerbell.LoadTemplates(exampletemplates.FS)
	if err != nil {
		t.Fatal(err)
	}
	hm := exampleHardwareMap()
	for _, v := range workflows.Versions {
		for _, tpl := range tpls {
			if tpl.Name != "wipe" && tpl.Name != "retire" {
				continue
			}
			r, err := workflows.RenderTemplate(v, *tpl.Spec.Data, hm, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("ok/"+string(v)+"/"+tpl.Name, func(t *testing.T) {
				if err := workflows.CheckTemplate(v, tpl.Name, r, hm); err != nil {
					t.Errorf("refused: %v", err)
				}
			})
			t.Run("refuse/"+string(v)+"/"+tpl.Name+" receipt elsewhere", func(t *testing.T) {
				task := r.Tasks[0]
				task.Actions = append([]tinkv1.Action(nil), task.Actions...)
				found := false
				for i, a := range task.Actions {
					if a.Name == "wipe-receipt" {
						a.Environment = map[string]string{"FLEETD_ACTION": "wipe-receipt", "FLEETD_WORKFLOW_DIR": "/tmp/receipt"}
						task.Actions[i], found = a, true
					}
				}
				if !found {
					t.Fatalf("Template %s has no wipe-receipt action", tpl.Name)
				}
				moved := r
				moved.Tasks = []tinkv1.Task{task}
				err := workflows.CheckTemplate(v, tpl.Name, moved, hm)
				if want := "action wipe-receipt reads its files from FLEETD_WORKFLOW_DIR=/tmp/receipt, but the agent writes them to /fleetd"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("got %v, want a refusal saying %q", err, want)
				}
			})
		}
	}
}

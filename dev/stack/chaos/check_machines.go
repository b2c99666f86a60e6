package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// checkMachine checks promises (c), (d) and (f) on one machine: its records (what authorized each
// of its disk writes, each configuration its installed OS was answered with), its files, and its
// real EK against the device's approved ones.
func (e *evidence) checkMachine(d stack.OwnerDevice, m stack.Machine, h *history) []Violation {
	var out []Violation
	bad := func(part, format string, args ...any) {
		out = append(out, Violation{Part: part, Device: d.Name, What: fmt.Sprintf(format, args...)})
	}
	ek, err := machineEK(m)
	if err != nil {
		bad(PartCerts, "its machine's EK cannot be read: %v", err)
		return out
	}
	recs, err := stack.ReadRecords(m.Dir)
	if err != nil {
		bad(PartWipe, "its machine's records cannot be read: %v", err)
		return out
	}
	ok := approved(d.Field("ek_sha256"), ek)
	if !ok {
		out = append(out, e.checkUnapproved(d, m, h, recs)...)
	}
	enrolled := map[string]stack.Record{} // by Workflow: the enrollment of this Workflow's run
	delivered := map[string]int{}         // by request: the fetches answered with a configuration
	for _, r := range recs {
		switch r.Kind {
		case stack.RecordDelivered:
			if delivered[r.Field("request")]++; delivered[r.Field("request")] == 2 {
				bad(PartDelivered, "the configuration of request %s was delivered again at %s: a configuration is served once", r.Field("request"),
					r.Time.Format("15:04:05.000000"))
			}
		case stack.RecordEnrolled:
			enrolled[r.Field("workflow")] = r
			for _, k := range []string{"ldevid_serial", "lak_serial"} {
				if s := r.Field(k); s != "" && !h.issued[s] {
					bad(PartCerts, "the machine holds certificate %s (%s) from request %s, which fleetd never recorded for the device", s, k, r.Field("request"))
				}
			}
		case stack.RecordWipe, stack.RecordImage, stack.RecordNoCloud:
			if why := e.unauthorized(d, m, h, r, enrolled[r.Field("workflow")], ok); why != "" {
				bad(PartWipe, "%s of %s (serial %s) at %s for request %s: %s", r.Kind, r.Field("target"), r.Field("serial"),
					r.Time.Format("15:04:05.000000"), r.Field("request"), why)
			}
		}
	}
	return out
}

// unauthorized says why a disk write was not authorized ("" when it was): it must follow, in
// the same Workflow's run, a successful enrollment for the same request that authorized the
// same disk; the disk must carry the device's declared serial; NetBox must hold fleetd's
// recorded attestation of that request, made before the write; the machine's EK must be
// approved; and the Workflow must be the request's, labelled with the device.
func (e *evidence) unauthorized(d stack.OwnerDevice, m stack.Machine, h *history, r, enr stack.Record, ekApproved bool) string {
	req, disk := r.Field("request"), r.Field("disk")
	declared := d.Field("disk_serial")
	attestedAt, attested := h.attested[req]
	wfs := e.workflows[req]
	switch {
	case !ekApproved:
		return "the machine's EK is not approved for the device"
	case enr.Kind == "" || enr.Field("request") != req || enr.Time.After(r.Time):
		return "no successful enrollment for this request preceded it in the same Workflow"
	case disk == "" || disk != enr.Field("disk"):
		return fmt.Sprintf("it acted on the shared directory's disk %q, not the disk %q the enrollment authorized", disk, enr.Field("disk"))
	case declared == "" || r.Field("serial") != declared:
		return fmt.Sprintf("the disk's serial is not the declared disk_serial %q", declared)
	case resolve(m, disk) != strings.TrimPrefix(r.Field("target"), "/dev/"):
		return fmt.Sprintf("the authorized disk %s is not the device it acted on", disk)
	case !attested:
		return "NetBox records no attestation by fleetd for this request"
	case attestedAt.After(r.Time):
		return "fleetd recorded the attestation only after the write (" + attestedAt.Format("15:04:05.000000") + ")"
	case len(wfs) != 1 || wfs[0].Name != r.Field("workflow") || wfs[0].Labels[workflows.LabelDeviceID] != strconv.FormatInt(d.ID, 10):
		return fmt.Sprintf("its Workflow %s is not the request's one Workflow of this device (%v)", r.Field("workflow"), names(wfs))
	}
	return ""
}

// resolve is the block device ("sda") a path of the machine's devfs names, "" when none. The
// agent writes the path under the devfs it was given (FLEETD_DEVFS, the machine's dev/); a
// plain /dev path is read in the machine's devfs too.
func resolve(m stack.Machine, devPath string) string {
	devfs := filepath.Join(m.Dir, stack.MachineDevDir)
	p := filepath.Clean(devPath)
	if !strings.HasPrefix(p, devfs+string(filepath.Separator)) {
		p = filepath.Join(devfs, strings.TrimPrefix(p, "/dev/"))
	}
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// checkUnapproved checks promise (d) for a machine whose EK the device does not approve:
// fleetd never recorded a certificate or an attestation for the device, and the machine was
// given nothing — no enrollment, no certificate or disk file, no node files, no disk write.
func (e *evidence) checkUnapproved(d stack.OwnerDevice, m stack.Machine, h *history, recs []stack.Record) []Violation {
	var out []Violation
	bad := func(format string, args ...any) {
		out = append(out, Violation{Part: PartCerts, Device: d.Name, What: "unapproved EK: " + fmt.Sprintf(format, args...)})
	}
	if h.certified {
		bad("fleetd recorded certificate serials %v for the device", keys(h.issued))
	}
	if h.progressed {
		bad("fleetd recorded an attestation of the device (requests %v)", keys(timesKeys(h.attested)))
	}
	for _, r := range recs {
		if r.Kind == stack.RecordEnrolled {
			bad("the machine enrolled for request %s", r.Field("request"))
		}
	}
	for _, f := range []string{"ldevid.pem", "ldevid.pub", "ldevid.priv", "lak.pem", "lak.blob", "disk"} {
		if _, err := os.Stat(filepath.Join(m.Dir, stack.MachineWorkflowDir, f)); err == nil {
			bad("the machine's shared directory holds %s", f)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(m.Dir, stack.MachineDiskDir, fleet.NodeDir)); err == nil && len(entries) > 0 {
		bad("the machine's disk holds node files in /%s", fleet.NodeDir)
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

func timesKeys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

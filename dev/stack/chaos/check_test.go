package chaos_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/stack/chaos"
	"github.com/folly-infra/fleetd/fleet"
)

// TestCheckerCatches: the checker finds each kind of violation when one is planted — by writing
// as fleetd would not, in a NetBox emulator and a namespace of the stack's API server of the
// test's own, with a machine directory written by hand — and finds none in a clean history. A
// checker that cannot see a violation would make every chaos run pass, so every branch of the
// checker that reports a violation has a row here that makes it fire.
func TestCheckerCatches(t *testing.T) {
	needStack(t)
	rows := append(promiseRows(), machineRows()...)
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f := newFixture(t, i, r.approved)
			r.plant(f)
			vs, err := chaos.Check(context.Background(), f.sources())
			if err != nil {
				t.Fatal(err)
			}
			var text []string
			found := false
			for _, v := range vs {
				text = append(text, v.String())
				found = found || (v.Part == r.want && strings.Contains(v.What, r.wantWhat))
				// Only a request that has not ended is a violation that waits for rest
				// (make load's LOAD_PHASES=storms counts those apart).
				if unended := strings.Contains(v.What, "at rest ("); v.Unended != unended {
					t.Errorf("%s: Unended %v, want %v", v, v.Unended, unended)
				}
			}
			switch {
			case r.want == "" && len(vs) > 0:
				t.Errorf("violations in a clean history:\n%s", strings.Join(text, "\n"))
			case r.want != "" && !found:
				t.Errorf("no %s violation saying %q; found:\n%s", r.want, r.wantWhat, strings.Join(text, "\n"))
			}
		})
	}
}

// plantRow is one planted history: the violated part it must be reported as, and words of its
// report ("" part: a clean history, no violation at all).
type plantRow struct {
	name     string
	approved bool // the machine's EK is the device's approved one
	plant    func(f *fixture)
	want     string
	wantWhat string
}

const r1, r2, w1, a1, rt1 = "provision-aaaaaaaa", "provision-bbbbbbbb", "wipe-cccccccc", "attest-dddddddd", "retire-eeeeeeee"

// copyBeforeClaim is the custom_fields of a device read between the owner's provision request
// and fleetd's claim, saved whole by a client that changed tpm (pynetbox's Record.save()).
const copyBeforeClaim = `{"desired_action": "provision", "fleet_state": null, "fleet_request": null, "fleet_workflow": null, ` +
	`"fleet_message": null, "ldevid_serial": null, "lak_serial": null, "tpm": "2.0"}`

// promiseRows plant what NetBox and the Kubernetes API record: (a), (b) and (e).
func promiseRows() []plantRow {
	return []plantRow{
		{"ok/a clean provision", true, func(f *fixture) { f.cleanProvision(r1) }, "", ""},
		{"ok/a clean provision, then a clean wipe", true, func(f *fixture) { f.cleanProvision(r1); f.cleanWipe(w1) }, "", ""},
		{"ok/another user wrote a field fleetd owns, and fleetd put its value back", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"lak_serial": "0bad"}}`)
			f.fleetd(`{"custom_fields": {"lak_serial": "0a02"}}`)
		}, "", ""},
		{"refuse/a field fleetd owns keeps a value another user wrote", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"lak_serial": "0bad"}}`)
		}, chaos.PartConsistent, "lak_serial keeps the value 0bad that admin wrote, not fleetd"},
		{"refuse/after an editor's two saves fleetd writes the first one's values back (a wiped identity revived)", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.cleanWipe(w1)
			f.owner(f.fields("active", r1, `"0a01"`, `"0a02"`))
			f.owner(f.fields("wiped", w1, "null", "null"))
			f.fleetd(f.fields("active", r1, `"0a01"`, `"0a02"`))
		}, chaos.PartConsistent, `fleetd wrote lak_serial = 0a02 back, a value admin wrote and fleetd had not`},
		{"ok/after an editor's two saves fleetd seals its own values again", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.cleanWipe(w1)
			f.owner(f.fields("active", r1, `"0a01"`, `"0a02"`))
			f.owner(f.fields("wiped", w1, "null", "null"))
			f.fleetd(`{"custom_fields": {"fleet_seal": "fs1.stack.2.bWFj"}}`)
		}, "", ""},
		{"refuse/fleetd seals over a value another user wrote", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"lak_serial": "0bad"}}`)
			f.fleetd(`{"custom_fields": {"fleet_message": "Boot check passed.", "fleet_seal": "fs1.stack.2.bWFj"}}`)
		}, chaos.PartConsistent, "fleetd saved the device leaving lak_serial = 0bad, which admin wrote, under its seal"},
		{"ok/nothing of fleetd's to put back: marked untrusted, then provisioned again", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"lak_serial": "0bad", "fleet_state": "configuring"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "untrusted", "fleet_message": "fleetd cannot vouch for the fields it owns", ` +
				`"fleet_request": null, "fleet_workflow": null, "ldevid_serial": null, "lak_serial": null}}`)
			f.remove("disk")
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r2, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, "", ""},
		{"refuse/a device marked untrusted keeps its certificate serials", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"fleet_state": "configuring"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "untrusted", "fleet_request": null, "fleet_workflow": null}}`)
		}, chaos.PartConsistent, "fleetd marked the device untrusted keeping request"},
		{"ok/a copy read before the claim saved whole, and fleetd put its fields back", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": ` + copyBeforeClaim + `}`)
			f.restore(r1, true)
		}, "", ""},
		{"ok/a copy read after the claim saved with a new desired_action, fleetd put active back and took it", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"desired_action": "attest", "fleet_state": "configuring", "tpm": null}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}}`)
			f.claim(a1, "")
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}}`)
		}, "", ""},
		{"refuse/a desired_action a copy wrote back taken as a new request", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": ` + copyBeforeClaim + `}`)
			f.restore(r1, false)
			f.claim(r2, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartWorkflow, "only one a copy wrote back"},
		{"refuse/a second request for one owner request", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.claim(r2, "")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartWorkflow, "no owner request waiting"},
		{"refuse/a request replaced while it ran", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r2, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartTerminal, "was replaced by request " + r2},
		{"refuse/a request that never ends", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
		}, chaos.PartTerminal, "is still pending at rest"},
		{"refuse/decommissioning whose retirement is never taken", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"status": "decommissioning"}`)
		}, chaos.PartTerminal, "no retirement was ever taken"},
		{"ok/a retired device set planned and decommissioning again is not retired again", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"status": "decommissioning"}`)
			f.claim(rt1, "")
			f.fleetd(`{"custom_fields": {"fleet_state": "wiping"}}`)
			disk := "disk=" + f.byID("sda")
			f.record(rt1, "enrolled", disk)
			f.record(rt1, "wipe", disk, "target=/dev/sda", "serial=SER-A")
			f.fleetd(`{"custom_fields": {"fleet_state": "retired", "ldevid_serial": null, "lak_serial": null}}`)
			f.owner(`{"status": "planned"}`)
			f.owner(`{"status": "decommissioning"}`)
		}, "", ""},
		{"refuse/two Workflows for one request", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.workflow(f.name+"-again", r1)
		}, chaos.PartWorkflow, "has 2 Workflows"},
		{"refuse/a request with no Workflow", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.fleetd(fmt.Sprintf(`{"custom_fields": {"desired_action": null, "fleet_state": "pending", "fleet_request": %q, "fleet_workflow": %q}, "status": "staged"}`, r1, f.wf(r1)))
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartWorkflow, "request " + r1 + " has 0 Workflows"},
		{"refuse/a request whose one Workflow is not the one its claim named", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.fleetd(fmt.Sprintf(`{"custom_fields": {"desired_action": null, "fleet_state": "pending", "fleet_request": %q, "fleet_workflow": %q}, "status": "staged"}`, r1, f.wf(r1)))
			f.workflow(f.name+"-other", r1)
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartWorkflow, "but its Workflow is " + "chk-"},
		{"refuse/a Workflow no device claimed", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.workflow(f.name+"-stray", "provision-strayyyy")
		}, chaos.PartWorkflow, "which no device's change log claims"},
		{"refuse/decommissioning written over", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"status": "decommissioning"}`)
			f.fleetd(`{"status": "active"}`)
		}, chaos.PartConsistent, "decommissioning is set by the owner and stays"},
		{"refuse/a wrong status for a claim", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "active")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartConsistent, "fleetd wrote status active with fleet_state pending for request " + r1 + ", want staged"},
		{"refuse/a claim that is not pending", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claimAs(r1, "staged", "installing", f.wf(r1))
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartConsistent, `with fleet_state "installing", not pending`},
		{"refuse/a claim that leaves desired_action set", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.fleetd(fmt.Sprintf(`{"custom_fields": {"fleet_state": "pending", "fleet_request": %q, "fleet_workflow": %q}, "status": "staged"}`, r1, f.wf(r1)))
			f.workflow(f.wf(r1), r1)
			f.fleetd(`{"custom_fields": {"fleet_state": "failed", "desired_action": null}, "status": "failed"}`)
		}, chaos.PartConsistent, "left desired_action provision set"},
		{"refuse/a Workflow name that is not the deterministic one", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claimAs(r1, "staged", "pending", f.name+"-custom")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartConsistent, "not its deterministic name " + "chk-"},
		{"refuse/a move the lifecycle does not allow", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "configuring"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartConsistent, `from "pending" to "configuring", which the lifecycle does not allow`},
		{"refuse/certificates written with wiped", true, func(f *fixture) { f.cleanProvision(r1); f.wipeKeepingCerts(w1) },
			chaos.PartConsistent, "fleetd wrote fleet_state wiped with ldevid_serial \"0a01\""},
		{"refuse/certificates left on a wiped device at rest", true, func(f *fixture) { f.cleanProvision(r1); f.wipeKeepingCerts(w1) },
			chaos.PartConsistent, "a wiped, retired or unconfirmed device has no certificates"},
		{"refuse/an active provision without certificates", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "installing"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "configuring"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}, "status": "active"}`)
		}, chaos.PartConsistent, "both are issued by a provision"},
		{"refuse/desired_action still set at rest", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"desired_action": "wipe"}}`)
		}, chaos.PartConsistent, "desired_action wipe is still set at rest"},
	}
}

// machineRows plant what the machine's records and files say: (c), (d) and (f).
func machineRows() []plantRow {
	return []plantRow{
		{"refuse/a configuration delivered twice", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"custom_fields": {"fleet_state": "configuring", "tpm": "2.0"}}`)
			f.record(r1, "delivered", "kind=talos")
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}}`)
		}, chaos.PartDelivered, "the configuration of request " + r1 + " was delivered again"},
		{"refuse/a wipe with no enrollment before it", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.record(r2, "wipe", "disk="+f.byID("sda"), "target=/dev/sda", "serial=SER-A")
		}, chaos.PartWipe, "no successful enrollment"},
		{"refuse/a wipe of a disk without the declared serial", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.record(r1, "wipe", "disk="+f.byID("sda"), "target=/dev/sdb", "serial=SER-B")
		}, chaos.PartWipe, "not the declared disk_serial"},
		{"refuse/a wipe of another block device than the authorized disk", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.record(r1, "wipe", "disk="+f.byID("sda"), "target=/dev/sdb", "serial=SER-A")
		}, chaos.PartWipe, "is not the device it acted on"},
		{"refuse/a wipe of a disk the enrollment did not authorize", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.record(r1, "wipe", "disk="+f.byID("sdb"), "target=/dev/sdb", "serial=SER-A")
		}, chaos.PartWipe, "not the disk"},
		{"refuse/a disk write before fleetd recorded the attestation", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			disk := "disk=" + f.byID("sda")
			f.record(r1, "enrolled", disk)
			f.record(r1, "wipe", disk, "target=/dev/sda", "serial=SER-A")
			f.attestAndDeliver()
		}, chaos.PartWipe, "fleetd recorded the attestation only after the write"},
		{"refuse/a disk write with no attestation recorded", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			disk := "disk=" + f.byID("sda")
			f.record(r1, "enrolled", disk)
			f.record(r1, "wipe", disk, "target=/dev/sda", "serial=SER-A")
			f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
		}, chaos.PartWipe, "NetBox records no attestation by fleetd for this request"},
		{"refuse/a disk write through another Workflow", true, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
			f.claim(r1, "staged")
			f.fleetd(`{"custom_fields": {"fleet_state": "installing", "ldevid_serial": "0a01", "lak_serial": "0a02"}}`)
			disk, other := "disk="+f.byID("sda"), f.name+"-elsewhere"
			f.recordIn(other, r1, "enrolled", disk, "ldevid_serial=0a01", "lak_serial=0a02")
			f.recordIn(other, r1, "wipe", disk, "target=/dev/sda", "serial=SER-A")
			f.fleetd(`{"custom_fields": {"fleet_state": "configuring"}}`)
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}, "status": "active"}`)
		}, chaos.PartWipe, "is not the request's one Workflow of this device"},
		{"ok/a renewal of an active node, the node holding the replaced certificates", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.nodeCerts("0a01", "0a02")
			f.renewal("0b01", "0b02")
		}, "", ""},
		{"ok/a renewal of an active node, the node holding the new certificates", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.nodeCerts("0b01", "0b02")
			f.renewal("0b01", "0b02")
			f.fleetd(`{"custom_fields": {"ldevid_serial_previous": null, "lak_serial_previous": null}}`)
		}, "", ""},
		{"refuse/a certificate renewed for a device that is not active", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.owner(`{"status": "offline"}`)
			f.fleetd(`{"custom_fields": {"lak_serial": "0b02", "lak_serial_previous": "0a02"}}`)
		}, chaos.PartCerts, `new certificate 0b02 (lak_serial) while the device was not an active node (status "offline"`},
		{"refuse/a certificate issued outside a provision's attestation", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.cleanWipe(w1)
			f.fleetd(`{"custom_fields": {"ldevid_serial": "0c01"}}`)
		}, chaos.PartCerts, `new certificate 0c01 (ldevid_serial) while the device was not an active node (status "offline", fleet_state "wiped"`},
		{"refuse/a renewal the journal names and no save of an active node recorded", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.journal("Boot check of chk renewed its LDevID 0d01 (replacing 0a01, valid until 2026-12-02T10:00:00Z) for the same TPM keys.")
		}, chaos.PartCerts, "says certificate 0d01 was renewed, but no save of the device as an active node recorded it"},
		{"refuse/an active node holding certificates fleetd no longer accepts", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.nodeCerts("0a01", "0a02")
			f.renewal("0b01", "0b02")
			f.fleetd(`{"custom_fields": {"lak_serial_previous": null}}`)
		}, chaos.PartCerts, `an active node lost the ability to pass its check: its lak.pem is certificate 0a02, but NetBox accepts lak_serial "0b02" (previous "")`},
		{"refuse/an active node whose certificate cannot be read", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.nodeCerts("", "0a02")
		}, chaos.PartCerts, "an active node's ldevid.pem cannot be read"},
		{"refuse/a certificate on the machine fleetd never recorded", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.record(r1, "enrolled", "disk="+f.byID("sda"), "ldevid_serial=0bad", "lak_serial=0a02")
		}, chaos.PartCerts, "holds certificate 0bad (ldevid_serial) from request " + r1 + ", which fleetd never recorded"},
		{"refuse/a machine whose EK cannot be read", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.remove(stack.MachineTPMDir)
		}, chaos.PartCerts, "its machine's EK cannot be read"},
		{"refuse/a machine whose records cannot be read", true, func(f *fixture) {
			f.cleanProvision(r1)
			f.remove(stack.MachineLog)
		}, chaos.PartWipe, "its machine's records cannot be read"},
		{"refuse/certificates for an unapproved EK", false, func(f *fixture) { f.cleanProvision(r1) }, chaos.PartCerts, "unapproved EK: fleetd recorded certificate serials"},
		{"refuse/an attestation recorded for an unapproved EK", false, func(f *fixture) {
			f.owner(`{"custom_fields": {"desired_action": "attest"}}`)
			f.claim("attest-dddddddd", "")
			f.fleetd(`{"custom_fields": {"fleet_state": "active"}}`)
		}, chaos.PartCerts, "unapproved EK: fleetd recorded an attestation of the device"},
		{"refuse/an unapproved machine that enrolled", false, func(f *fixture) {
			f.refusedRequest(r1)
			f.record(r1, "enrolled", "disk="+f.byID("sda"))
		}, chaos.PartCerts, "unapproved EK: the machine enrolled for request " + r1},
		{"refuse/an unapproved machine holding a certificate file", false, func(f *fixture) {
			f.refusedRequest(r1)
			f.file(stack.MachineWorkflowDir, "ldevid.pem")
		}, chaos.PartCerts, "unapproved EK: the machine's shared directory holds ldevid.pem"},
		{"refuse/an unapproved machine holding node files", false, func(f *fixture) {
			f.refusedRequest(r1)
			f.file(filepath.Join(stack.MachineDiskDir, fleet.NodeDir), fleet.NodeFileLAKCert)
		}, chaos.PartCerts, "unapproved EK: the machine's disk holds node files"},
		{"refuse/an unapproved machine with a disk write", false, func(f *fixture) {
			f.refusedRequest(r1)
			f.record(r1, "wipe", "disk="+f.byID("sda"), "target=/dev/sda", "serial=SER-A")
		}, chaos.PartWipe, "the machine's EK is not approved for the device"},
	}
}

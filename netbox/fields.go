package netbox

import (
	"fmt"
	"slices"
	"sort"

	"github.com/folly-infra/fleetd/fleet"
)

// The custom fields of docs/design.md §2 on dcim.device, by NetBox name.
const (
	// Declared by the owner.
	CFClass         = "fleet_class"
	CFDiskSerial    = "disk_serial"
	CFEKSHA256      = "ek_sha256"
	CFTPM           = "tpm"
	CFEKCertificate = "ek_certificate"
	CFDesiredAction = "desired_action"
	// Written by fleetd.
	CFState        = "fleet_state"
	CFMessage      = "fleet_message"
	CFRequest      = "fleet_request"
	CFWorkflow     = "fleet_workflow"
	CFLDevIDSerial = "ldevid_serial"
	CFLAKSerial    = "lak_serial"
	// The serials a renewal replaced, accepted until the node first presents the new ones
	// (docs/enrollment.md, "Renewal").
	CFLDevIDSerialPrevious = "ldevid_serial_previous"
	CFLAKSerialPrevious    = "lak_serial_previous"
	CFBootBaseline         = "boot_baseline"
	CFLastBootCheck        = "last_boot_check"
	CFBootCheck            = "boot_check"
	CFIdentity             = "fleet_identity" // JSON: fleet.IdentityMaterial
	CFFacts                = "fleet_facts"    // JSON: layout.Facts
	// CFSeal is the seal of every field fleetd owns (fleet/seal.go, docs/design.md §9).
	CFSeal = "fleet_seal"
)

// DeviceStatuses are NetBox's device status values (dcim DeviceStatusChoices, 4.6).
var DeviceStatuses = []string{"offline", "active", "planned", "staged", "failed", "inventory", "decommissioning"}

// fleetdField is what the adapter needs of one custom field.
type fleetdField struct {
	name    string
	typ     string
	written bool     // fleetd writes it, so the UI must not (ui_editable "no")
	choices []string // the values the adapter converts, for select fields
}

// OwnedFields are the custom fields fleetd writes (docs/design.md §2, "Written by fleetd") plus
// desired_action, which it clears when it takes a request: a change to these alone is fleetd's
// own echo.
func OwnedFields() []string {
	out := []string{CFDesiredAction}
	for _, f := range fleetdFields() {
		if f.written {
			out = append(out, f.name)
		}
	}
	return out
}

func fleetdFields() []fleetdField {
	return []fleetdField{
		{name: CFClass, typ: "text"},
		{name: CFDiskSerial, typ: "text"},
		{name: CFEKSHA256, typ: "text"},
		{name: CFTPM, typ: "select", choices: []string{string(fleet.TPM20), string(fleet.TPM12)}},
		{name: CFEKCertificate, typ: "select", choices: strs(fleet.EKCerts)},
		{name: CFDesiredAction, typ: "select", choices: strs(fleet.DesiredActions)},
		{name: CFState, typ: "select", written: true, choices: strs(fleet.States)},
		{name: CFMessage, typ: "text", written: true},
		{name: CFRequest, typ: "text", written: true},
		{name: CFWorkflow, typ: "text", written: true},
		{name: CFLDevIDSerial, typ: "text", written: true},
		{name: CFLAKSerial, typ: "text", written: true},
		{name: CFLDevIDSerialPrevious, typ: "text", written: true},
		{name: CFLAKSerialPrevious, typ: "text", written: true},
		{name: CFBootBaseline, typ: "text", written: true},
		{name: CFLastBootCheck, typ: "text", written: true},
		{name: CFBootCheck, typ: "select", written: true, choices: []string{string(fleet.BootCheckOK),
			string(fleet.BootCheckDrift), string(fleet.BootCheckFailed)}},
		{name: CFIdentity, typ: "json", written: true},
		{name: CFFacts, typ: "json", written: true},
		{name: CFSeal, typ: "text", written: true},
	}
}

// checkFleetdFields makes sure the schema defines every custom field the adapter reads and
// writes, on dcim.device, with the type and choices the adapter's conversions expect.
func (s Schema) checkFleetdFields() []string {
	var p []string
	for _, want := range fleetdFields() {
		f, ok := s.CustomField(want.name)
		if !ok {
			p = append(p, fmt.Sprintf("custom field %s is missing: fleetd reads and writes it on dcim.device (docs/design.md §2)", want.name))
			continue
		}
		if !slices.Contains(f.ObjectTypes, "dcim.device") {
			p = append(p, fmt.Sprintf("custom field %s: object_types must include dcim.device", want.name))
		}
		if f.Type != want.typ {
			p = append(p, fmt.Sprintf("custom field %s: type is %s, fleetd needs %s", want.name, f.Type, want.typ))
		}
		if want.written && f.UIEditable != "no" {
			p = append(p, fmt.Sprintf("custom field %s: fleetd writes it, so ui_editable must be \"no\"", want.name))
		}
		if f.Required {
			p = append(p, fmt.Sprintf("custom field %s: required would make NetBox reject devices that do not set it", want.name))
		}
		if want.choices == nil {
			continue
		}
		cs, ok := s.ChoiceSet(f.ChoiceSet)
		if !ok {
			continue // reported by checkField
		}
		got, need := sortedCopy(cs.Values()), sortedCopy(want.choices)
		if !slices.Equal(got, need) {
			p = append(p, fmt.Sprintf("custom field %s: choice set %s has values %v, fleetd needs exactly %v", want.name, cs.Name, got, need))
		}
	}
	return p
}

func strs[T ~string](in []T) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}

func sortedCopy(in []string) []string {
	out := slices.Clone(in)
	sort.Strings(out)
	return out
}

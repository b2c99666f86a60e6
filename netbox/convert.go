package netbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/netbox/layout"
)

// deviceJSON is the part of NetBox's device representation fleetd reads, decoded leniently:
// any status value, any extra fields, so that a newer NetBox's answer reads as well as this
// one's. go-netbox's generated models decode every nested object NetBox's answer names, each
// strictly; that cost about a third of a decision's CPU and refused a status value newer than
// go-netbox v4.3.0 (docs/performance.md).
type deviceJSON struct {
	ID     int64   `json:"id"`
	Name   *string `json:"name"`
	Serial string  `json:"serial"`
	Status *struct {
		Value string `json:"value"`
	} `json:"status"`
	PrimaryIP4 *struct {
		Address string `json:"address"`
	} `json:"primary_ip4"`
	// CustomFields stay undecoded until toDevice reads the ones fleetd knows: fleet_identity (its
	// two certificate chains, some 6 KB of a running node's 9) is decoded once, straight into its
	// type, not into maps and back through JSON (docs/performance.md).
	CustomFields map[string]jsontext.Value `json:"custom_fields"`
	LastUpdated  string                    `json:"last_updated"`
}

// deviceFields are the fields of a device a listing asks NetBox for (?fields=): those deviceJSON
// reads. NetBox then renders and sends nothing else of the fleet's devices at every reconcile
// pass (site, role, type, rack, tags, config context ...); decoding the listing is most of a
// pass's CPU (docs/performance.md, "The steady state's reconcile pass").
const deviceFields = "id,name,serial,status,primary_ip4,custom_fields,last_updated"

type deviceListJSON struct {
	Count   int          `json:"count"`
	Results []deviceJSON `json:"results"`
}

// toDevice converts NetBox's device to fleet's (docs/design.md §2). Custom-field values are taken as the
// owner wrote them; only their JSON types are normalised (a non-string where text is expected
// reads as empty). ek_sha256 is split and lowercased but not validated: fleet does that.
func toDevice(d deviceJSON, macs []fleet.MAC, version string) (fleet.Device, error) {
	dev := fleet.Device{ID: d.ID, Serial: d.Serial, MACs: macs, Version: version}
	if d.Name != nil {
		dev.Name = *d.Name
	}
	if d.Status != nil {
		dev.Status = fleet.Status(d.Status.Value)
	}
	if d.PrimaryIP4 != nil && d.PrimaryIP4.Address != "" {
		p, err := netip.ParsePrefix(d.PrimaryIP4.Address)
		if err != nil {
			return fleet.Device{}, fmt.Errorf("read device %d (%s): primary IPv4 %q is not an address with prefix length", d.ID, dev.Name, d.PrimaryIP4.Address)
		}
		dev.Address = p
	}
	cf := func(name string) string {
		raw := d.CustomFields[name]
		var s string
		if len(raw) == 0 || raw[0] != '"' || jsonv2.Unmarshal(raw, &s, lenientJSON) != nil {
			return "" // null, or not text: read as empty
		}
		return strings.TrimSpace(s)
	}
	dev.Declared = fleet.Declaration{Class: cf(CFClass), DiskSerial: cf(CFDiskSerial),
		EKHashes: splitHashes(cf(CFEKSHA256)), TPM: fleet.TPMVersion(cf(CFTPM)),
		EKCert: fleet.EKCert(cf(CFEKCertificate)), DesiredAction: fleet.Action(cf(CFDesiredAction))}
	dev.Owned = fleet.Owned{State: fleet.State(cf(CFState)), Message: cf(CFMessage), Request: cf(CFRequest),
		Workflow: cf(CFWorkflow), LDevIDSerial: cf(CFLDevIDSerial), LAKSerial: cf(CFLAKSerial),
		LDevIDSerialPrevious: cf(CFLDevIDSerialPrevious), LAKSerialPrevious: cf(CFLAKSerialPrevious),
		BootBaseline: cf(CFBootBaseline), BootCheck: fleet.BootCheck(cf(CFBootCheck))}
	if s := cf(CFLastBootCheck); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fleet.Device{}, fmt.Errorf("read device %d (%s): last_boot_check %q is not an RFC 3339 time", d.ID, dev.Name, s)
		}
		dev.Owned.LastBootCheck = t.UTC()
	}
	dev.Owned.Identity = identity(d.CustomFields[CFIdentity])
	dev.Owned.Facts, dev.Owned.FactsUnreadable = facts(d.CustomFields[CFFacts])
	dev.Seal = cf(CFSeal)
	if d.LastUpdated != "" {
		// NetBox's last_updated (DRF renders it in RFC 3339); a value that does not parse is
		// no time, and the trust check then reads the change log again after the device.
		if t, err := time.Parse(time.RFC3339Nano, d.LastUpdated); err == nil {
			dev.LastUpdated = t.UTC()
		}
	}
	return dev, nil
}

// FieldsOf reads a device's custom fields as a webhook's snapshot carries them (the raw
// custom_field_data, docs/design.md §9): the declaration and the fields fleetd owns of the device
// they describe. Nothing else of the Device is set.
func FieldsOf(customFields map[string]any) (fleet.Device, error) {
	raw := make(map[string]jsontext.Value, len(customFields))
	for k, v := range customFields {
		b, err := json.Marshal(v)
		if err != nil {
			return fleet.Device{}, fmt.Errorf("custom field %s: %w", k, err)
		}
		raw[k] = b
	}
	return toDevice(deviceJSON{CustomFields: raw}, nil, "")
}

// isNull reports a custom field that is absent or null.
func isNull(raw jsontext.Value) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// identity decodes fleet_identity. A value that is not fleetd's JSON reads as no identity: a
// fetch then serves nothing, and the stale-write protection puts fleetd's value back.
func identity(raw jsontext.Value) fleet.IdentityMaterial {
	var m fleet.IdentityMaterial
	if isNull(raw) || raw[0] != '{' || jsonv2.Unmarshal(raw, &m, lenientJSON) != nil {
		return fleet.IdentityMaterial{}
	}
	return m
}

// facts decodes fleet_facts (layout.DecodeFacts). A value that is not facts this fleetd reads is no
// facts, with the reason: an inventory check then reports the device's facts as unreadable, and
// the stale-write protection puts fleetd's value back.
func facts(raw jsontext.Value) (layout.Facts, string) {
	if isNull(raw) {
		return layout.Facts{}, ""
	}
	f, err := layout.DecodeFacts(raw)
	if err != nil {
		return layout.Facts{}, err.Error()
	}
	return f, ""
}

func splitHashes(field string) []string {
	var out []string
	for _, h := range strings.Split(field, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// patchBody is the PATCH of an Update: only the custom-field keys the patch sets (null clears
// one, NetBox merges per key) and the status when set.
func patchBody(p fleet.Patch) (map[string]any, string) {
	cf := map[string]any{}
	if p.ClearDesiredAction {
		cf[CFDesiredAction] = nil
	}
	str := func(key string, v *string) {
		if v == nil {
			return
		}
		if *v == "" {
			cf[key] = nil
		} else {
			cf[key] = *v
		}
	}
	if p.State != nil {
		s := string(*p.State)
		str(CFState, &s)
	}
	str(CFMessage, p.Message)
	str(CFRequest, p.Request)
	str(CFWorkflow, p.Workflow)
	str(CFLDevIDSerial, p.LDevIDSerial)
	str(CFLAKSerial, p.LAKSerial)
	str(CFLDevIDSerialPrevious, p.LDevIDSerialPrevious)
	str(CFLAKSerialPrevious, p.LAKSerialPrevious)
	str(CFBootBaseline, p.BootBaseline)
	if p.LastBootCheck != nil {
		s := ""
		if !p.LastBootCheck.IsZero() {
			// RFC 3339 with fractional seconds: the boot check's replay test compares nonce issue
			// times with it to the nanosecond (fleet/bootcheck.go). Reads accept both forms.
			s = p.LastBootCheck.UTC().Format(time.RFC3339Nano)
		}
		str(CFLastBootCheck, &s)
	}
	if p.BootCheck != nil {
		s := string(*p.BootCheck)
		str(CFBootCheck, &s)
	}
	if p.Identity != nil {
		cf[CFIdentity] = nil
		if !p.Identity.Empty() {
			cf[CFIdentity] = *p.Identity // encoded as a JSON object
		}
	}
	if p.Facts != nil {
		cf[CFFacts] = nil
		if !p.Facts.Empty() {
			cf[CFFacts] = *p.Facts // encoded as a JSON object
		}
	}
	if p.Seal != "" {
		cf[CFSeal] = p.Seal
	}
	return cf, string(p.Status)
}

// ifaceJSON is the part of an interface fleetd reads (decoded leniently: go-netbox's interface
// type is a closed enum and NetBox keeps adding types). Its MAC addresses come nested
// (mac_addresses: NetBox 4.2 and later render every MAC assigned to the interface, brief), so a
// device's MACs are one list of its interfaces, not that and a list of MAC addresses.
type ifaceJSON struct {
	ID     int64 `json:"id"`
	Device struct {
		ID int64 `json:"id"`
	} `json:"device"`
	MgmtOnly   bool `json:"mgmt_only"`
	PrimaryMAC *struct {
		ID int64 `json:"id"`
	} `json:"primary_mac_address"`
	MACs []struct {
		ID         int64  `json:"id"`
		MACAddress string `json:"mac_address"`
	} `json:"mac_addresses"`
}

// ifaceFields is what fleetd asks of an interface (?fields=, NetBox 4.0 and later): the rest of
// NetBox's interface representation is some 50 fields that NetBox would render and fleetd skip.
const ifaceFields = "id,device,mgmt_only,primary_mac_address,mac_addresses"

// orderMACs returns a device's MACs, primary interface first: interfaces that are not
// management-only before those that are, each in NetBox's order, and within an interface its
// primary MAC before the others, which keep NetBox's order. MACs that do not parse are skipped.
func orderMACs(ifaces []ifaceJSON) []fleet.MAC {
	sort.SliceStable(ifaces, func(i, j int) bool { return !ifaces[i].MgmtOnly && ifaces[j].MgmtOnly })
	var out []fleet.MAC
	add := func(s string) {
		if mac, err := fleet.ParseMAC(s); err == nil {
			out = append(out, mac)
		}
	}
	for _, f := range ifaces {
		primary := int64(-1)
		if f.PrimaryMAC != nil {
			primary = f.PrimaryMAC.ID
		}
		for _, m := range f.MACs {
			if m.ID == primary {
				add(m.MACAddress)
			}
		}
		for _, m := range f.MACs {
			if m.ID != primary {
				add(m.MACAddress)
			}
		}
	}
	return out
}

// sentinel maps NetBox's status to fleet's error contract.
func sentinel(code int) error {
	switch code {
	case http.StatusNotFound:
		return fleet.ErrNotFound
	case http.StatusPreconditionFailed:
		return fleet.ErrConflict
	}
	return nil
}

// decodeLenient decodes an answer of NetBox's with the JSON v2 implementation, as the list pages
// (getPage, lenientJSON): unknown members skipped, invalid UTF-8 and duplicate names accepted.
func decodeLenient(body []byte, v any) error {
	if err := jsonv2.Unmarshal(body, v, lenientJSON); err != nil {
		return fmt.Errorf("decode NetBox's answer: %w", err)
	}
	return nil
}

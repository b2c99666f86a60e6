package fleet

import (
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"net/netip"
	"strings"
	"time"
)

// Device is one NetBox device (dcim.device) as fleetd reads it: the owner's declaration, the
// state fleetd keeps on it, and the version token used for conditional writes (docs/design.md §2).
//
// Everything in a Device came from NetBox and is trusted as the owner's word; nothing in it came
// from the machine itself. Owned is the exception: NetBox users who may edit devices can write
// those fields too, so the service's reads hold in Owned only values it can vouch for (its own
// sealed writes, trust.go) and zero otherwise, and say so in Trust.
type Device struct {
	ID      int64
	Name    string
	Status  Status
	Serial  string       // NetBox's serial field (the chassis serial the owner recorded), may be empty
	Address netip.Prefix // primary IPv4 with its prefix length; invalid when the device has none
	MACs    []MAC        // every MAC NetBox knows for the device, primary interface first

	Declared Declaration
	Owned    Owned

	// Version is NetBox's ETag for the device (NetBox ≥ 4.6), empty on older NetBox. An update
	// that carries it applies only if nobody changed the device since it was read.
	Version string
	// Seal is fleet_seal as NetBox holds it: claimed until checked against Owned (seal.go).
	Seal string
	// LastUpdated is NetBox's last_updated of the device: when it was last saved (zero when
	// not known). A change-log read that ends before it may have missed that save (trust.go).
	LastUpdated time.Time
	// Trust is the service's verdict on Owned (trust.go); the zero Trust of a Device the
	// service did not read vouches for nothing.
	Trust Trust
}

// Declaration is what the owner declares through OpenTofu (docs/design.md §2, "Declared by the owner").
type Declaration struct {
	Class         string
	DiskSerial    string
	EKHashes      []string // lowercase hex SHA-256 of each approved EK's DER SubjectPublicKeyInfo
	TPM           TPMVersion
	EKCert        EKCert // whether the TPM has an EK certificate; "" means it has one
	DesiredAction Action // the owner's open request, ActionNone when there is none
}

// Owned is the state fleetd writes on the device (docs/design.md §2, "Written by fleetd").
type Owned struct {
	State        State
	Message      string
	Request      string // id of the request being carried out
	Workflow     string // name of the Tinkerbell Workflow carrying it out
	LDevIDSerial string
	LAKSerial    string
	// LDevIDSerialPrevious and LAKSerialPrevious are the serials a boot check's renewal replaced,
	// kept until the node first presents the new ones, so a renewal whose answer was lost never
	// leaves the node unable to pass its next check (renew.go).
	LDevIDSerialPrevious string
	LAKSerialPrevious    string
	BootBaseline         string
	LastBootCheck        time.Time // zero when the device never passed a boot check
	BootCheck            BootCheck
	// Identity is what the current provision's configuration carries (identity.go); empty
	// outside a provision and after a wipe or retirement.
	Identity IdentityMaterial
	// Facts are what fleetd last learned about the machine at an accepted enrollment or boot
	// check (fleet_facts, layout.Facts); empty when none are recorded or the field could not be read,
	// and FactsUnreadable then says why (a value fleetd did not write, or a newer fleetd's).
	Facts           layout.Facts
	FactsUnreadable string
}

// MAC is a hardware address in the form Tinkerbell and Kea use: lowercase, colon-separated.
type MAC string

// ParseMAC accepts the forms NetBox and operators write (upper or lower case, ':' or '-') and
// returns the canonical lowercase colon-separated form.
func ParseMAC(s string) (MAC, error) {
	t := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", ":"))
	parts := strings.Split(t, ":")
	if len(parts) != 6 {
		return "", fmt.Errorf("parse MAC %q: want six colon-separated octets", s)
	}
	for _, p := range parts {
		if len(p) != 2 || strings.Trim(p, "0123456789abcdef") != "" {
			return "", fmt.Errorf("parse MAC %q: octet %q is not two hex digits", s, p)
		}
	}
	return MAC(t), nil
}

// PrimaryMAC is the MAC Tinkerbell identifies the machine by (hardwareMap device_1), or "".
func (d Device) PrimaryMAC() MAC {
	if len(d.MACs) == 0 {
		return ""
	}
	return d.MACs[0]
}

// IP is the device's NetBox address without prefix length; invalid when it has none.
func (d Device) IP() netip.Addr {
	if !d.Address.IsValid() {
		return netip.Addr{}
	}
	return d.Address.Addr()
}

// IsEKHash reports whether h is an ek_sha256 entry: 64 lowercase hex digits (the NetBox adapter
// lowercases what the owner typed).
func IsEKHash(h string) bool {
	return len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
}

// Status is the NetBox device status (dcim DeviceStatusChoices).
type Status string

const (
	StatusOffline         Status = "offline"
	StatusActive          Status = "active"
	StatusPlanned         Status = "planned"
	StatusStaged          Status = "staged"
	StatusFailed          Status = "failed"
	StatusInventory       Status = "inventory"
	StatusDecommissioning Status = "decommissioning"
)

// TPMVersion is the declared tpm custom field; empty means 2.0.
type TPMVersion string

const (
	TPM20 TPMVersion = "2.0"
	TPM12 TPMVersion = "1.2"
)

// EKCert is the declared ek_certificate custom field (docs/netbox.md): whether the machine's TPM
// has an EK certificate. Empty means it has one. Under the EK policy hash+cert an EK is approved
// without a certificate only when the device is declared EKCertNone.
type EKCert string

const (
	EKCertPresent EKCert = "present"
	EKCertNone    EKCert = "none"
)

// EKCerts are the values of the ek_certificate choice set.
var EKCerts = []EKCert{EKCertPresent, EKCertNone}

// Action is what the owner asks for. ActionRetire is not a desired_action value: it is requested
// by setting the device status to decommissioning.
type Action string

const (
	ActionNone      Action = ""
	ActionProvision Action = "provision"
	ActionAttest    Action = "attest"
	ActionWipe      Action = "wipe"
	ActionRetire    Action = "retire"
)

// Actions lists every action in the order the docs present them.
var Actions = []Action{ActionProvision, ActionAttest, ActionWipe, ActionRetire}

// DesiredActions are the values of the desired_action choice set.
var DesiredActions = []Action{ActionProvision, ActionAttest, ActionWipe}

// BootCheck is the outcome of the last boot check (docs/design.md §5).
type BootCheck string

const (
	BootCheckNone   BootCheck = ""
	BootCheckOK     BootCheck = "ok"
	BootCheckDrift  BootCheck = "drift"
	BootCheckFailed BootCheck = "failed"
)

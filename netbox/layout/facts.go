// Package layout is what fleetd stores in NetBox's custom fields beside the adapter that
// stores them (docs/design.md, "Packages"): the fleet_facts JSON. The domain decides on it, the
// netbox adapter encodes it; what crosses the wire to nodes and operators is package api.
package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Facts is what fleetd last learned about a machine at an accepted enrollment or boot check, kept
// in the device's fleet_facts JSON custom field (docs/design.md, "Attested facts"). NetBox stays
// the only durable state: fleetd keeps no copy, and `fleetd inventory check` compares the owner's
// declaration with this field.
//
// Each half says how much it is worth. Proved is what the TPM proved to fleetd (the EK approved,
// the quote and event log verified under fleetd's nonce). Claimed is only what the agent said
// (the SMBIOS UUID, the disks, the MAC): a machine running a hostile agent can claim anything
// there, so a claimed fact can show that a machine changed, never prove what it is. Claimed
// values are capped (MaxFactDisks, MaxFactText) and checked for shape before they are stored
// (docs/security.md, "Claimed input").
//
// Each half has its own Since: the time of the last accepted enrollment, or of the first boot
// check after it that found other values. A boot check that finds the same values writes nothing
// here (the check's own time is last_boot_check).
//
// The JSON keys are the contract with other fleetd versions: add keys, never rename them.
type Facts struct {
	Version int          `json:"version"` // FactsVersion
	Proved  ProvedFacts  `json:"proved"`
	Claimed ClaimedFacts `json:"claimed"`
}

// FactsVersion is the version of Facts' JSON this fleetd writes and reads.
const FactsVersion = 1

// The sources of a half of Facts: the evidence that last changed it.
const (
	FactsFromEnrollment = "enrollment"
	FactsFromBootCheck  = "boot-check"
)

// ProvedFacts are what the TPM proved at the enrollment or boot check named by Source.
type ProvedFacts struct {
	// EKSHA256 is the lowercase hex SHA-256 of the EK's DER SubjectPublicKeyInfo, the EK the
	// enrollment approved (a boot check is made with the LAK, certified for that EK).
	EKSHA256 string `json:"ek_sha256"`
	// EKIssuer is the issuer DN of the EK certificate that chained to a manufacturer CA; empty
	// when the EK was approved by its hash alone (or the TPM has no EK certificate).
	EKIssuer string `json:"ek_issuer,omitempty"`
	// TPMManufacturer is the TPM's manufacturer, the tcg-at-tpmManufacturer code of the EK
	// certificate's subjectAltName in lowercase hex (e.g. "00001014"), when its chain was verified;
	// empty otherwise.
	TPMManufacturer string `json:"tpm_manufacturer,omitempty"`
	// TPMVersion is the TPM version the attestation proved: "2.0" (fleetd verifies TPM 2.0's
	// credential activation and quotes only), followed by the specification level and revision
	// when the EK certificate's chain was verified and its tcg-at-tpmSpecification names a TPM
	// 2.0 ("2.0 level 0 revision 1.64"). Empty in facts from before fleetd kept it.
	TPMVersion string `json:"tpm_version,omitempty"`
	// BootState is the lowercase hex digest of the quoted boot state: what the boot baseline
	// compares (boot_baseline), from the verified event log.
	BootState string `json:"boot_state,omitempty"`
	// BootPolicy is the boot policy entry the verified boot matched, when one did (the
	// enrollment's HookOS boot is checked against the boot policy; an installed node's boot is
	// compared with its baseline, so a boot check's BootPolicy is empty).
	BootPolicy string `json:"boot_policy,omitempty"`
	Learned
}

// ClaimedFacts are what the agent said at the enrollment or boot check named by Source.
// Untrusted: see Facts.
type ClaimedFacts struct {
	// SMBIOSUUIDSHA256 is the lowercase hex SHA-256 of the claimed SMBIOS system UUID, trimmed
	// and lowercased (fleet.UUIDHash); the UUID itself is not kept.
	SMBIOSUUIDSHA256 string `json:"smbios_uuid_sha256,omitempty"`
	// Disks are the whole disks the agent found, in the agent's order, at most MaxFactDisks.
	Disks []FactDisk `json:"disks,omitempty"`
	// DisksFound is how many disks the agent reported; more than len(Disks) when the list was
	// capped, so a check knows the list is not the whole machine.
	DisksFound int `json:"disks_found,omitempty"`
	// MAC is the MAC the agent netbooted from (HookOS) or boots from (the installed node's
	// default-route interface), lowercase and colon-separated; empty when the agent did not say
	// (an agent older than fleet_facts).
	MAC string `json:"mac,omitempty"`
	Learned
}

// Learned is when, and from which evidence, a half of Facts took its values (its JSON keys
// since and source sit in the half's object).
type Learned struct {
	Since  time.Time `json:"since"`  // the last enrollment, or the first boot check since that found these values
	Source string    `json:"source"` // FactsFromEnrollment or FactsFromBootCheck
}

func (l Learned) equal(o Learned) bool { return l.Since.Equal(o.Since) && l.Source == o.Source }

// check refuses a half (named half) without its time, or with a source fleetd does not write.
func (l Learned) check(half string) error {
	switch {
	case l.Since.IsZero():
		return fmt.Errorf("%s facts have no since", half)
	case l.Source != FactsFromEnrollment && l.Source != FactsFromBootCheck:
		return fmt.Errorf("%s facts have source %.32q, want %s or %s", half, l.Source, FactsFromEnrollment, FactsFromBootCheck)
	}
	return nil
}

// FactDisk is one disk the agent found.
type FactDisk struct {
	Serial string `json:"serial"`
	Path   string `json:"path,omitempty"` // its /dev/disk/by-id path
}

// The caps on claimed facts (docs/security.md, "Claimed input"): a machine's agent decides what it
// claims, so what fleetd stores of it is bounded. A list of more disks is stored capped (with
// DisksFound); a longer serial or path, or one with control characters, is refused.
const (
	MaxFactDisks = 64  // disks kept in ClaimedFacts.Disks
	MaxFactText  = 128 // bytes of a disk serial
	MaxFactPath  = 256 // bytes of a disk path
	// MaxFactsJSON bounds what fleetd decodes from fleet_facts: 64 disks at their caps fit well.
	MaxFactsJSON = 64 << 10
)

// Empty reports whether no facts are recorded (the field is unset or cleared).
func (f Facts) Empty() bool { return f.Proved.Since.IsZero() && f.Claimed.Since.IsZero() }

// SameValues reports whether p and o hold the same proved values, whenever and wherever they
// were learned (Since and Source are not compared).
func (p ProvedFacts) SameValues(o ProvedFacts) bool {
	p.Learned, o.Learned = Learned{}, Learned{}
	return p == o
}

// SameValues reports whether c and o hold the same claimed values (Since and Source are not
// compared).
func (c ClaimedFacts) SameValues(o ClaimedFacts) bool {
	if c.SMBIOSUUIDSHA256 != o.SMBIOSUUIDSHA256 || c.MAC != o.MAC || c.DisksFound != o.DisksFound || len(c.Disks) != len(o.Disks) {
		return false
	}
	for i := range c.Disks {
		if c.Disks[i] != o.Disks[i] {
			return false
		}
	}
	return true
}

// Equal reports whether f and o are the same facts, times included (what the stale-write
// protection compares).
func (f Facts) Equal(o Facts) bool {
	return f.Version == o.Version &&
		f.Proved.SameValues(o.Proved) && f.Proved.Learned.equal(o.Proved.Learned) &&
		f.Claimed.SameValues(o.Claimed) && f.Claimed.Learned.equal(o.Claimed.Learned)
}

// CheckFactDisk refuses a claimed disk fleetd would not store: an empty, too long or
// non-printable serial, or a path too long or non-printable.
func CheckFactDisk(serial, path string) error {
	switch {
	case strings.TrimSpace(serial) == "":
		return errors.New("a disk has no serial")
	case len(serial) > MaxFactText:
		return fmt.Errorf("a disk serial is %d bytes, more than %d", len(serial), MaxFactText)
	case !printable(serial):
		return fmt.Errorf("the disk serial %.64q has control characters", serial)
	case len(path) > MaxFactPath:
		return fmt.Errorf("a disk path is %d bytes, more than %d", len(path), MaxFactPath)
	case !printable(path):
		return fmt.Errorf("the disk path %.64q has control characters", path)
	}
	return nil
}

// Check refuses facts this fleetd does not read: another version, a half without its time or
// source, a hash that is not one, or claimed values beyond their caps.
func (f Facts) Check() error {
	var problems []error
	if f.Version != FactsVersion {
		problems = append(problems, fmt.Errorf("version %d, this fleetd reads version %d", f.Version, FactsVersion))
	}
	if !f.Proved.Since.IsZero() || f.Proved.EKSHA256 != "" {
		if !isHexHash(f.Proved.EKSHA256) {
			problems = append(problems, errors.New("proved ek_sha256 is not a hex SHA-256"))
		}
		problems = append(problems, f.Proved.Learned.check("proved"))
	}
	if !f.Claimed.Since.IsZero() || f.Claimed.Source != "" {
		problems = append(problems, f.Claimed.Learned.check("claimed"))
	}
	if h := f.Claimed.SMBIOSUUIDSHA256; h != "" && !isHexHash(h) {
		problems = append(problems, errors.New("claimed smbios_uuid_sha256 is not a hex SHA-256"))
	}
	if m := f.Claimed.MAC; m != "" && !IsMAC(m) {
		problems = append(problems, fmt.Errorf("claimed mac %.32q is not a lowercase colon-separated MAC", m))
	}
	if n := len(f.Claimed.Disks); n > MaxFactDisks || n > f.Claimed.DisksFound {
		problems = append(problems, fmt.Errorf("claimed disks: %d listed of %d found, at most %d are kept", n, f.Claimed.DisksFound, MaxFactDisks))
	}
	for _, d := range f.Claimed.Disks {
		if err := CheckFactDisk(d.Serial, d.Path); err != nil {
			problems = append(problems, fmt.Errorf("claimed disks: %w", err))
			break
		}
	}
	return errors.Join(problems...)
}

// DecodeFacts reads fleet_facts as NetBox returns it (raw JSON; null or absent is no facts).
// Anything else that is not facts this fleetd reads (not JSON, unknown version, values beyond
// their caps, too large) is no facts too, with the reason in the error: the field is the owner's
// to see and anyone's to write, so its value is never trusted to be well-formed. It never panics
// (FuzzDecodeFacts).
func DecodeFacts(raw []byte) (Facts, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return Facts{}, nil
	}
	if len(raw) > MaxFactsJSON {
		return Facts{}, fmt.Errorf("fleet_facts is %d bytes, more than %d", len(raw), MaxFactsJSON)
	}
	var f Facts
	if err := json.Unmarshal(raw, &f); err != nil {
		return Facts{}, fmt.Errorf("fleet_facts is not fleetd's facts: %w", err)
	}
	if err := f.Check(); err != nil {
		return Facts{}, fmt.Errorf("fleet_facts: %w", err)
	}
	f.Proved.Since, f.Claimed.Since = f.Proved.Since.UTC(), f.Claimed.Since.UTC()
	return f, nil
}

// IsMAC reports whether s is a MAC in the form fleetd keeps: six lowercase hex octets separated
// by colons.
func IsMAC(s string) bool {
	if len(s) != 17 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func isHexHash(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"time"

	"github.com/folly-infra/fleetd/attest"
)

// The attested facts (docs/design.md, "Attested facts"): at each accepted enrollment and boot
// check fleetd keeps what it learned about the machine in fleet_facts (layout.Facts), in the write
// that records the evidence, and only when a value changed: a half whose values are the same
// keeps its Since, and facts that are the same are not written at all.

// ClaimedHardware is what an agent says of the machine besides its TPM's proofs. Untrusted: the
// agent decides it (claimedFacts checks its shape and caps it before anything is stored).
type ClaimedHardware struct {
	SMBIOSUUID string
	Disks      []attest.Disk
	MAC        string // the interface it netbooted or boots from; "" when the agent did not say
}

// claimedFacts checks and caps what the agent claimed: the MAC must be a MAC (stored in its
// canonical form), each disk's serial and path within api's caps and printable; a list longer
// than layout.MaxFactDisks is stored capped, with the count found. The SMBIOS UUID is kept as its
// hash. A malformed claim is a refusal (claim_malformed): nothing claimed is silently dropped.
func claimedFacts(c ClaimedHardware) (layout.ClaimedFacts, error) {
	var out layout.ClaimedFacts
	if normUUID(c.SMBIOSUUID) != "" {
		out.SMBIOSUUIDSHA256 = UUIDHash(c.SMBIOSUUID)
	}
	if c.MAC != "" {
		m, err := ParseMAC(c.MAC)
		if err != nil {
			return layout.ClaimedFacts{}, &attest.Refusal{Check: attest.CheckClaimMalformed, Msg: fmt.Sprintf("the claimed MAC %.32q is not a MAC", c.MAC)}
		}
		out.MAC = string(m)
	}
	for _, d := range c.Disks {
		if err := layout.CheckFactDisk(d.Serial, d.Path); err != nil {
			return layout.ClaimedFacts{}, &attest.Refusal{Check: attest.CheckClaimMalformed, Msg: "claimed disks: " + err.Error()}
		}
		if len(out.Disks) < layout.MaxFactDisks {
			out.Disks = append(out.Disks, layout.FactDisk{Serial: d.Serial, Path: d.Path})
		}
	}
	out.DisksFound = len(c.Disks)
	return out, nil
}

// bootState is the hex SHA-256 of a verified boot's baseline text: what the boot baseline
// compares, in a form short enough to keep with the facts.
func bootState(vb *attest.VerifiedBoot) string {
	sum := sha256.Sum256([]byte(vb.BaselineText))
	return hex.EncodeToString(sum[:])
}

// nextFacts is the device's facts after evidence that proved p and claimed c at now from source,
// and whether they differ from what NetBox holds. A boot check's half with the same values keeps
// its Since and Source (the hourly check writes nothing more; last_boot_check says when it saw
// them); an enrollment's always starts again at now, so that facts an enrollment found the same
// after a declaration change are not left stale behind it (one per request, in the write that
// records it anyway). A nil claimed half (an agent that sent no claims) keeps the one NetBox holds.
func nextFacts(cur layout.Facts, p *layout.ProvedFacts, c *layout.ClaimedFacts, now time.Time, source string) (layout.Facts, bool) {
	next := layout.Facts{Version: layout.FactsVersion, Proved: cur.Proved, Claimed: cur.Claimed}
	renew := source == layout.FactsFromEnrollment
	if p != nil && (renew || !(cur.Proved.SameValues(*p) && !cur.Proved.Since.IsZero())) {
		next.Proved = *p
		next.Proved.Since, next.Proved.Source = now, source
	}
	if c != nil && (renew || !(cur.Claimed.SameValues(*c) && !cur.Claimed.Since.IsZero())) {
		next.Claimed = *c
		next.Claimed.Since, next.Claimed.Source = now, source
	}
	return next, !next.Equal(cur)
}

// enrollmentFacts are the facts an accepted enrollment proved and claimed.
func enrollmentFacts(v verified, claimed layout.ClaimedFacts) (layout.ProvedFacts, layout.ClaimedFacts) {
	return layout.ProvedFacts{EKSHA256: v.token.EKSHA256, EKIssuer: v.token.EKIssuer, TPMManufacturer: v.token.TPMManufacturer, TPMVersion: v.token.TPMVersion,
		BootState: bootState(v.boot), BootPolicy: v.bootPolicy}, claimed
}

// bootCheckProved is what an accepted boot check proved: the boot state, by the LAK fleetd
// certified for the EK the facts (or, from before fleet_facts, the identity) name. The EK's own
// facts are the enrollment's, but for a TPM version they lack (facts from before it was kept):
// "2.0", since the LAK is a restricted TPM 2.0 key and its quote TPM 2.0's. A boot is compared
// with the baseline, not the boot policy. Nil when fleetd knows no EK for the device.
func bootCheckProved(d Device, vb *attest.VerifiedBoot) *layout.ProvedFacts {
	p := d.Owned.Facts.Proved
	p.Since, p.Source = time.Time{}, ""
	if p.EKSHA256 == "" {
		p = layout.ProvedFacts{EKSHA256: d.Owned.Identity.EKSHA256}
	}
	if !IsEKHash(p.EKSHA256) {
		return nil
	}
	p.BootState, p.BootPolicy = bootState(vb), ""
	if p.TPMVersion == "" {
		p.TPMVersion = attest.TPMVersion20
	}
	return &p
}

package fleet

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"strings"
	"time"

	goattest "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// The hourly boot check (docs/design.md §5). A running node asks for a nonce, quotes its PCRs over it with
// the AK fleetd certified at enrollment, and sends the quote, its event log and its LAK
// certificate. fleetd keeps nothing between the two round trips: the nonce travels in a sealed
// token with its issue time, and NetBox's last_boot_check is the only memory of earlier checks.
//
// Trust: every field of BootCheckInput is a claim of whoever reached the route. The LAK
// certificate names the device but is public, so it identifies no one by itself. The device is
// identified when the certificate is the device's current LAK (lak_serial) and a quote over this
// check's nonce verifies under its key: only the device's TPM can make that signature. Refusals
// before that point record nothing in NetBox (whoever sent them is not known to be the device,
// so they must not be able to mark it failed); verification failures after it are the device's
// and are recorded as boot_check=failed.

// errBootChecksUnwired is a wiring bug: Deps.Attest has no LAK verifier or nonce sealer.
var errBootChecksUnwired = errors.New("boot checks are not wired: fleet.Attestation needs LAK and BootNonces")

// BootChecks is the hourly boot check and the renewal of the device certificates it carries
// (renew.go): it verifies a running node's quote and event log against its baseline and records
// the outcome on the device.
type BootChecks struct {
	core    *core
	catalog Catalog
	attest  Attestation
	boots   *attest.BootCache // the last replayed boot of each node
	bootIDs *nameIndex        // the device id of each name a boot check found
}

// BootCheckInput is a node's boot check, in go-attestation's types.
type BootCheckInput struct {
	Token    string   // the sealed nonce token from BootCheckNonce
	LAKChain [][]byte // DER, the LAK leaf first
	Platform goattest.PlatformParameters
	LDevID   *LDevIDProof // nil when the node sent none (renew.go)
	// Claimed is what the node says of its hardware (facts.go); nil from an agent older than
	// fleet_facts, which leaves the claimed facts as they are.
	Claimed *ClaimedHardware
}

// BootCheckResult is an accepted boot check.
type BootCheckResult struct {
	Device        string
	Outcome       BootCheck // ok or drift
	BaselineTaken bool
	Changes       []string // drift: the differences from the baseline, one sentence per event
	SecureBoot    string
	CheckedAt     time.Time // recorded as last_boot_check
	Renewal       Renewed   // certificates renewed in this check, or why a due one was not
}

// BootCheckNonce issues the nonce of a boot check and the token that carries it.
func (s *BootChecks) BootCheckNonce() (attest.BootNonce, Outcome, error) {
	out := Outcome{Step: "boot-check-nonce", Result: "issued"}
	if s.attest.BootNonces == nil || s.attest.LAK == nil {
		out.Result = "error"
		return attest.BootNonce{}, out, errBootChecksUnwired
	}
	n, err := s.attest.BootNonces.Issue()
	if err != nil {
		out.Result = "error"
		return attest.BootNonce{}, out, err
	}
	return n, out, nil
}

// BootCheck verifies a node's boot check and records it. In order: the nonce token (issued by
// fleetd, unexpired); the LAK certificate (issued by the fleet's LAK CA, valid) and the device it
// names; under the device's lock, that the LAK is the device's current one (lak_serial), that the
// device is an active node, and that the nonce was issued after the last accepted check (no
// replay); the quote under the LAK's key and the nonce, and the PCR values; then, the device being
// identified, the event log replay and the class's Secure Boot policy. The boot is compared with
// the device's baseline and the outcome recorded (see recordBootCheck).
func (s *BootChecks) BootCheck(ctx context.Context, in BootCheckInput) (BootCheckResult, Outcome, error) {
	out := Outcome{Step: "boot-check", Result: "refused"}
	if s.attest.BootNonces == nil || s.attest.LAK == nil {
		out.Result = "error"
		return BootCheckResult{}, out, errBootChecksUnwired
	}
	nonce, err := s.attest.BootNonces.Open(in.Token)
	if err != nil {
		return BootCheckResult{}, s.bootCheckRefused(out, err), err
	}
	lak, err := s.attest.LAK.Verify(in.LAKChain)
	if err != nil {
		return BootCheckResult{}, s.bootCheckRefused(out, err), err
	}
	var claimed *layout.ClaimedFacts
	if in.Claimed != nil {
		cf, err := claimedFacts(*in.Claimed)
		if err != nil {
			return BootCheckResult{}, s.bootCheckRefused(Outcome{Device: lak.Device, Step: "boot-check", Result: "refused"}, err), err
		}
		claimed = &cf
	}
	d, err := s.bootCheckTarget(ctx, lak.Device)
	if errors.Is(err, ErrNotFound) {
		err = Refuse(RefusedNotFound, "unknown_device",
			"the LAK certificate names device %q, which NetBox does not have: the device was deleted or renamed", lak.Device)
		return BootCheckResult{}, s.bootCheckRefused(Outcome{Device: lak.Device, Step: "boot-check", Result: "refused"}, err), err
	}
	if err != nil {
		return BootCheckResult{}, out, fmt.Errorf("read device %q: %w: %w", lak.Device, ErrNetBoxUnavailable, err)
	}
	unlock := s.core.locks.lock(d.ID)
	defer unlock()
	c := bootCheck{nonce: nonce, lak: lak, platform: in.Platform, ldevid: in.LDevID, claimed: claimed}
	for attempt := 0; ; attempt++ {
		// The device read before the lock is used when it carries a version: the conditional
		// write then fails if anyone changed it since, and the retry reads it again.
		if attempt > 0 || d.Version == "" {
			if d, err = s.core.netbox.Device(ctx, d.ID); err != nil {
				return BootCheckResult{}, out, fmt.Errorf("read device %s: %w: %w", lak.Device, ErrNetBoxUnavailable, err)
			}
		}
		// Decided on fleetd's own values only: another user's write of them is put back first
		// (a repair writes only when another user wrote last, so a caller with a copied
		// certificate cannot make fleetd write more than that user's saves did).
		if d, err = s.core.judgedOnOwnFields(ctx, d); err != nil {
			if _, ok := AsRefusal(err); ok {
				return BootCheckResult{}, s.bootCheckRefused(outcomeFor(d, ActionNone, "boot-check", "refused"), err), err
			}
			return BootCheckResult{}, out, err
		}
		res, out, err := s.bootCheckDevice(ctx, d, &c)
		if errors.Is(err, ErrConflict) && attempt < maxConflicts {
			s.core.metrics.conflicts.Inc()
			continue
		}
		return res, out, err
	}
}

// bootCheckTarget reads the device a LAK certificate names. The id a name had at the device's
// last check is read directly, without its MACs (one NetBox request, with the ETag the record's
// conditional write needs); a name never seen, or whose device is gone or was renamed since, is
// looked up by name.
func (s *BootChecks) bootCheckTarget(ctx context.Context, name string) (Device, error) {
	if id, ok := s.bootIDs.get(name); ok {
		d, err := s.core.netbox.DeviceFields(ctx, id)
		switch {
		case err == nil && d.Name == name:
			return d, nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return Device{}, err
		}
		s.bootIDs.forget(name)
	}
	d, err := s.core.netbox.DeviceByName(ctx, name)
	if err == nil {
		s.bootIDs.put(name, d.ID)
	}
	return d, err
}

// bootCheck is one check's claims and, once verified, its verified boot (kept across re-reads of
// a device that changed under the write).
type bootCheck struct {
	nonce    attest.BootNonce
	lak      *attest.VerifiedLAK
	platform goattest.PlatformParameters
	ldevid   *LDevIDProof
	ak       *attest.VerifiedAK // the LAK's key, once the quote verified under it
	boot     *attest.VerifiedBoot
	failure  error // a verification failure of the identified device
	renewed  map[pki.Profile]*pki.Certificate
	claimed  *layout.ClaimedFacts // checked and capped; nil when the node claimed nothing
}

// bootCheckDevice runs the checks that depend on the device as NetBox has it now, then records
// the outcome.
func (s *BootChecks) bootCheckDevice(ctx context.Context, d Device, c *bootCheck) (BootCheckResult, Outcome, error) {
	out := outcomeFor(d, ActionNone, "boot-check", "refused")
	if err := bootCheckAllowed(d, c); err != nil {
		return BootCheckResult{}, s.bootCheckRefused(out, err), err
	}
	if c.boot == nil && c.failure == nil {
		if err := s.verifyBoot(d, c); err != nil {
			return BootCheckResult{}, s.bootCheckRefused(out, err), err
		}
	}
	if c.failure != nil {
		return s.recordBootFailure(ctx, d, out, c.failure)
	}
	return s.recordBootCheck(ctx, d, out, c)
}

// bootCheckAllowed refuses a check by a key that is no longer the device's, for a device renamed
// since its attestation (AttestedAs), for a device that is not a running node, or made before
// the last accepted check. The LAK a renewal replaced
// (lak_serial_previous) is the device's for the handover only (renew.go); after it, a LAK
// certificate of the current LAK's key that is not the current one is refused lak_replaced.
func bootCheckAllowed(d Device, c *bootCheck) error {
	if d.Owned.State == StateUntrusted {
		return Refuse(RefusedConflict, "owned_fields_untrusted",
			"%s is untrusted: fleetd found values of its fields it did not write and cleared them; only an owner's new request (attest or provision) brings it back", d.Name)
	}
	if attested, renamed := AttestedAs(d); renamed {
		// The LAK names d.Name, so it is not the LAK of this device's attestation, whose
		// certificates name attested: another machine's (a device editor swapped names), or
		// none of fleetd's. lak_not_current would refuse it too; this says why.
		return Refuse(RefusedForbidden, "device_renamed",
			"the LAK certificate names %s, and device %s was attested as %s and renamed since: a boot check is taken only under the name the device was attested under; provision it again under its new name",
			c.lak.Device, d.Name, attested)
	}
	current := d.Owned.LAKSerial != "" && strings.EqualFold(c.lak.SerialHex, d.Owned.LAKSerial)
	previous := d.Owned.LAKSerial != "" && d.Owned.LAKSerialPrevious != "" && strings.EqualFold(c.lak.SerialHex, d.Owned.LAKSerialPrevious)
	if !current && !previous && replacedLAK(d, c.lak.Cert) {
		return Refuse(RefusedForbidden, "lak_replaced",
			"LAK certificate %s of %s was replaced by a renewal (lak_serial %s), and its handover is over: the node presented the renewed certificate since; its lak.pem must be the renewed one (a node directory restored from a copy holds an old one)",
			c.lak.SerialHex, d.Name, d.Owned.LAKSerial)
	}
	if !current && !previous {
		current := d.Owned.LAKSerial
		if current == "" {
			current = "none"
		}
		return Refuse(RefusedForbidden, "lak_not_current",
			"LAK certificate %s is not %s's current LAK (lak_serial %s): the machine was reprovisioned, wiped or retired since it was issued",
			c.lak.SerialHex, d.Name, current)
	}
	if !d.Owned.State.Running() || d.Status == StatusDecommissioning {
		return Refuse(RefusedConflict, "not_active",
			"%s is not an active node (fleet_state %s, status %s): boot checks are taken only from active and joining devices",
			d.Name, stateWord(d.Owned.State), d.Status)
	}
	if !c.nonce.IssuedAt.After(d.Owned.LastBootCheck) {
		return Refuse(RefusedConflict, "replayed",
			"the nonce was issued at %s, not after %s's last accepted boot check at %s: a check is accepted once; ask for a new nonce",
			c.nonce.IssuedAt.Format(time.RFC3339Nano), d.Name, d.Owned.LastBootCheck.Format(time.RFC3339Nano))
	}
	return nil
}

// verifyBoot verifies the quote under the LAK's key and, the device then being identified, the
// event log and Secure Boot. A refusal of the key or the quote is returned; a failure after them
// is kept in c.failure, to be recorded on the device.
func (s *BootChecks) verifyBoot(d Device, c *bootCheck) error {
	ak, err := c.lak.AK(c.platform.Public)
	if err != nil {
		return err
	}
	boot, err := s.boots.VerifyPlatform(d.Name, d.Owned.BootBaseline, ak, c.nonce.Nonce, c.platform)
	if ar, ok := attest.AsRefusal(err); ok && ar.Check == attest.CheckQuote {
		return err
	}
	if err == nil {
		class, _ := s.catalog.Class(d.Declared.Class) // a class gone from classes.json requires nothing
		err = attest.RequireSecureBoot(boot, class.SecureBoot == SecureBootRequired)
	}
	if err != nil {
		if _, ok := attest.AsRefusal(err); !ok {
			return fmt.Errorf("verify the boot of %s: %w", d.Name, err)
		}
		c.failure = err
		return nil
	}
	c.boot, c.ak = boot, ak
	return nil
}

// bootCheckRefused counts a refusal and names its check in the outcome.
func (s *BootChecks) bootCheckRefused(out Outcome, err error) Outcome {
	code := "error"
	if r, ok := AsRefusal(err); ok {
		code, out.Check = r.Code, r.Code
	}
	s.core.metrics.bootCheckRuns.WithLabelValues(code).Inc()
	return out
}

// replacedLAK reports whether lak certifies the key of the device's current LAK (fleet_identity):
// a certificate a renewal replaced, since only a renewal issues a second LAK for one key.
func replacedLAK(d Device, lak *x509.Certificate) bool {
	cur := currentCert(d.Owned.Identity.LAK.Chain, d.Owned.LAKSerial)
	if cur == nil || lak == nil {
		return false
	}
	k, ok := cur.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(lak.PublicKey)
}

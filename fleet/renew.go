package fleet

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	goattest "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// Renewal through the boot check (docs/enrollment.md, "Renewal"). An accepted check (ok) of a
// node that should run — NetBox status active, fleet_state active, no desired_action, not
// decommissioning, its EK still approved — whose LDevID or LAK passed its renewal point gets new
// certificates for the same TPM keys in the answer. The LAK's AK proves itself by the check's
// quote; the LDevID key by a TPM2_Certify by that AK over the same nonce, whose key must be the
// one fleetd issued the device's LDevID for (fleet_identity).
//
// The handover: the write that records the renewal moves the serials the node presented into
// ldevid_serial_previous and lak_serial_previous. A replaced certificate is accepted for the
// handover only, which ends at the first of: an accepted check that presents the new one (the
// previous serial is then cleared), or the replaced certificate's NotAfter. Within it, a check
// that presents the replaced certificate is answered with the renewal's certificates again, as
// fleet_identity records them — never with new ones: a replaced certificate yields one issuance,
// the renewal's, however often it is presented. After it, the replaced LAK is refused
// lak_replaced (bootcheck.go), or lak_untrusted once expired. A renewal cut anywhere — the answer
// lost, the node down before it writes its files, fleetd killed after the NetBox write, NetBox
// failing the write — leaves the node with certificates fleetd still accepts, and its next check
// gets the renewal's certificates (or, when NetBox never recorded the renewal, renews them).
//
// Refusals are the node's business, not NetBox's: the check is recorded as usual and the answer
// says which code kept the certificates from being renewed; no journal entry is written for it.

// The codes of a due certificate that was not renewed (api.Renewal.Refused).
const (
	RenewRefusedDrift       = "drift"              // the boot differs from its baseline
	RenewRefusedNotActive   = "device_not_active"  // NetBox status is not active
	RenewRefusedAction      = "action_pending"     // the owner set desired_action
	RenewRefusedIdentity    = "identity_missing"   // fleet_identity holds no readable certificates
	RenewRefusedEKChanged   = "ek_changed"         // the EK the identity was issued for is no longer approved
	RenewRefusedLDevIDOld   = "ldevid_not_current" // the node's LDevID is neither the current nor the previous one
	RenewRefusedLDevIDProof = "ldevid_unproven"    // no proof, or a proof that does not verify, of the LDevID key
	RenewRefusedError       = "renewal_failed"     // fleetd could not issue (its log says why)
)

// LDevIDProof is the LDevID part of a boot check, in go-attestation's types (api.BootCheckLDevID).
// Both fields are claims until verified.
type LDevIDProof struct {
	Chain         [][]byte // DER, leaf first: which LDevID the node holds
	Certification goattest.CertificationParameters
}

// Renewed is what a boot check did about the node's certificates: the certificates it answers
// with (issued in this check, or redelivered: the renewal's that the node has not presented
// yet; nil when neither), or the code and message of why a due one was not renewed.
type Renewed struct {
	LDevID, LAK *pki.Certificate
	Refused     string
	Message     string
	// ldevidCounted and lakCounted: the certificate was due (or the LDevID not current, or a
	// replaced one), so the check's result for it is counted (results).
	ldevidCounted, lakCounted bool
	// ldevidRedelivered and lakRedelivered: LDevID or LAK is the renewal's certificate, sent
	// again to a node that presented the one it replaced; nothing was issued for it.
	ldevidRedelivered, lakRedelivered bool
}

// RenewRedelivered is fleetd_cert_renewals_total's result for a replaced certificate answered
// with its renewal's certificate again (the handover).
const RenewRedelivered = "redelivered"

// results is what the check did about each certificate that was due (or, for the LDevID, not
// current; or a replaced one), for fleetd_cert_renewals_total: "renewed", "redelivered" or the
// code that kept it from being renewed.
func (r Renewed) results() map[pki.Profile]string {
	out := map[pki.Profile]string{}
	for _, c := range []struct {
		p           pki.Profile
		cert        *pki.Certificate
		counted     bool
		redelivered bool
	}{{pki.ProfileLDevID, r.LDevID, r.ldevidCounted, r.ldevidRedelivered}, {pki.ProfileLAK, r.LAK, r.lakCounted, r.lakRedelivered}} {
		switch {
		case c.redelivered:
			out[c.p] = RenewRedelivered
		case c.cert != nil:
			out[c.p] = "renewed"
		case c.counted && r.Refused != "":
			out[c.p] = r.Refused
		}
	}
	return out
}

// Any reports whether the answer has something to say about the certificates.
func (r Renewed) Any() bool { return r.LDevID != nil || r.LAK != nil || r.Refused != "" }

// heldCerts is which of the device's certificates the node presented, and whether each is due.
// A replaced certificate (previous) is never due: its renewal was issued already.
type heldCerts struct {
	lakPrevious, lakDue bool
	ldevidSerial        string // "" when the node sent no LDevID
	ldevidPrevious      bool
	ldevidDue           bool
	ldevidStale         bool // neither the current nor the previous serial
}

// held reads what the node presented: its LAK (verified, current or previous) and its LDevID's
// serial (a claim: it only chooses between the two serials fleetd accepts, and the renewal point
// is read from fleetd's own copy of the current LDevID when the serial is that one).
func (s *BootChecks) held(d Device, c *bootCheck) heldCerts {
	var h heldCerts
	h.lakPrevious = !strings.EqualFold(c.lak.SerialHex, d.Owned.LAKSerial)
	h.lakDue = !h.lakPrevious && s.attest.Issuer.RenewalDue(pki.ProfileLAK, c.lak.Cert)
	if c.ldevid == nil || len(c.ldevid.Chain) == 0 {
		return h
	}
	leaf, err := x509.ParseCertificate(c.ldevid.Chain[0])
	if err != nil {
		h.ldevidSerial, h.ldevidStale = "unreadable", true
		return h
	}
	h.ldevidSerial = fmt.Sprintf("%x", leaf.SerialNumber.Bytes())
	switch {
	case d.Owned.LDevIDSerial != "" && strings.EqualFold(h.ldevidSerial, d.Owned.LDevIDSerial):
		if cur := currentLDevID(d); cur != nil {
			leaf = cur
		}
		h.ldevidDue = s.attest.Issuer.RenewalDue(pki.ProfileLDevID, leaf)
	case d.Owned.LDevIDSerialPrevious != "" && strings.EqualFold(h.ldevidSerial, d.Owned.LDevIDSerialPrevious):
		h.ldevidPrevious = true
	default:
		h.ldevidStale = true
	}
	return h
}

// currentLDevID is fleetd's own copy of the device's current LDevID (fleet_identity), or nil.
func currentLDevID(d Device) *x509.Certificate {
	return currentCert(d.Owned.Identity.LDevID.Chain, d.Owned.LDevIDSerial)
}

// currentCert is the leaf of chain when it is the certificate of serial, or nil.
func currentCert(chain [][]byte, serial string) *x509.Certificate {
	if len(chain) == 0 || serial == "" {
		return nil
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil || !strings.EqualFold(fmt.Sprintf("%x", leaf.SerialNumber.Bytes()), serial) {
		return nil
	}
	return leaf
}

// CertTimes is when a device's current certificate (ldevid_serial or lak_serial, as
// fleet_identity carries it) expires and from when a boot check renews it; zero when fleetd has
// no copy of it.
type CertTimes struct {
	NotAfter, RenewAfter time.Time
}

// certTimes reads the current LDevID's and LAK's times from fleet_identity; issuer, when set, says
// when each is due for renewal.
func certTimes(issuer *pki.Issuer, d Device) (ldevid, lak CertTimes) {
	at := func(p pki.Profile, c *x509.Certificate) CertTimes {
		if c == nil {
			return CertTimes{}
		}
		t := CertTimes{NotAfter: c.NotAfter.UTC()}
		if issuer != nil {
			t.RenewAfter = issuer.RenewalPoint(p, c).UTC()
		}
		return t
	}
	return at(pki.ProfileLDevID, currentLDevID(d)), at(pki.ProfileLAK, currentCert(d.Owned.Identity.LAK.Chain, d.Owned.LAKSerial))
}

// renew decides a recorded check's renewal and adds it to p: the serials the node now presents
// as current clear the previous ones, and due certificates are issued and recorded with the
// identity material. It returns what the answer carries and the journal entry of a renewal ("" for
// none). Issued certificates are kept in c, so a re-run after a conflicting write issues none again.
func (s *BootChecks) renew(d Device, c *bootCheck, outcome BootCheck, p *Patch) (Renewed, string) {
	if s.attest.Issuer == nil {
		return Renewed{}, "" // a fleetd wired for boot checks alone (benchmarks) issues nothing
	}
	h := s.held(d, c)
	out, msg := s.renewHeld(d, c, h, outcome, p)
	out.ldevidCounted, out.lakCounted = h.ldevidDue || h.ldevidStale || h.ldevidPrevious, h.lakDue || h.lakPrevious
	return out, msg
}

func (s *BootChecks) renewHeld(d Device, c *bootCheck, h heldCerts, outcome BootCheck, p *Patch) (Renewed, string) {
	empty := ""
	if !h.lakPrevious && d.Owned.LAKSerialPrevious != "" {
		p.LAKSerialPrevious = &empty // the node holds the renewed LAK: the old one is no longer accepted
	}
	if h.ldevidSerial != "" && !h.ldevidPrevious && !h.ldevidStale && d.Owned.LDevIDSerialPrevious != "" {
		p.LDevIDSerialPrevious = &empty
	}
	var out Renewed
	if h.ldevidStale {
		out.Refused, out.Message = RenewRefusedLDevIDOld, fmt.Sprintf("the node's LDevID %s is not %s's current LDevID (ldevid_serial %s): it is not renewed and lapses at its expiry; provision the device again for a new one",
			h.ldevidSerial, d.Name, orNone(d.Owned.LDevIDSerial))
	}
	if !h.lakDue && !h.ldevidDue && !h.lakPrevious && !h.ldevidPrevious {
		return out, ""
	}
	if r := renewalRefusal(d, outcome); r != nil {
		return Renewed{Refused: r.Code, Message: r.Msg}, ""
	}
	// The handover: a replaced certificate gets the renewal's again, never a new one.
	if r := redeliver(d, h, &out); r != nil {
		return Renewed{Refused: r.Code, Message: r.Msg}, ""
	}
	if !h.lakDue && !h.ldevidDue {
		return out, "" // a redelivery writes nothing: NetBox holds it already
	}
	id, err := pki.RenewIdentity(d.Name, d.Serial, c.lak.Cert)
	if err != nil {
		return s.renewFailed(d, err), ""
	}
	if h.ldevidDue {
		key, r := s.provenLDevID(d, c)
		if r != nil {
			out.Refused, out.Message = r.Code, r.Msg
		} else if out.LDevID, err = c.issued(pki.ProfileLDevID, func() (*pki.Certificate, error) { return s.attest.Issuer.IssueLDevID(id, key) }); err != nil {
			return s.renewFailed(d, err), ""
		}
	}
	if h.lakDue {
		if out.LAK, err = c.issued(pki.ProfileLAK, func() (*pki.Certificate, error) { return s.attest.Issuer.IssueLAK(id, c.lak.Public) }); err != nil {
			return s.renewFailed(d, err), ""
		}
	}
	if (out.LDevID == nil || out.ldevidRedelivered) && (out.LAK == nil || out.lakRedelivered) {
		return out, ""
	}
	return out, s.renewalPatch(d, c, h, out, p)
}

// redeliver puts into out the renewal's certificates for the replaced ones the node presented,
// as fleet_identity records them (the current serials), or refuses when it holds no copy of them.
func redeliver(d Device, h heldCerts, out *Renewed) *Refusal {
	if h.lakPrevious {
		if out.LAK = recordedCert(d.Owned.Identity.LAK.Chain, d.Owned.LAKSerial); out.LAK == nil {
			return Refuse(RefusedConflict, RenewRefusedIdentity,
				"%s's fleet_identity does not hold the LAK %s that replaced the node's: provision the device again", d.Name, d.Owned.LAKSerial)
		}
		out.lakRedelivered = true
	}
	if h.ldevidPrevious {
		if out.LDevID = recordedCert(d.Owned.Identity.LDevID.Chain, d.Owned.LDevIDSerial); out.LDevID == nil {
			return Refuse(RefusedConflict, RenewRefusedIdentity,
				"%s's fleet_identity does not hold the LDevID %s that replaced the node's: provision the device again", d.Name, d.Owned.LDevIDSerial)
		}
		out.ldevidRedelivered = true
	}
	return nil
}

// recordedCert is chain as a certificate when its leaf is the certificate of serial, or nil.
func recordedCert(chain [][]byte, serial string) *pki.Certificate {
	if currentCert(chain, serial) == nil {
		return nil
	}
	var c pki.Certificate
	for i, der := range chain {
		x, err := x509.ParseCertificate(der)
		if err != nil {
			return nil
		}
		if i == 0 {
			c.Leaf = x
		} else {
			c.Chain = append(c.Chain, x)
		}
	}
	return &c
}

// renewalPatch records issued certificates on p and says so for the journal.
func (s *BootChecks) renewalPatch(d Device, c *bootCheck, h heldCerts, out Renewed, p *Patch) string {
	m := d.Owned.Identity
	var parts []string
	if out.LDevID != nil && !out.ldevidRedelivered {
		ns, prev := out.LDevID.SerialHex(), strings.ToLower(h.ldevidSerial)
		p.LDevIDSerial, p.LDevIDSerialPrevious = &ns, &prev
		m.LDevID.Chain = out.LDevID.DER()
		parts = append(parts, fmt.Sprintf("LDevID %s (replacing %s, valid until %s)", ns, prev, out.LDevID.Leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z")))
	}
	if out.LAK != nil && !out.lakRedelivered {
		ns, prev := out.LAK.SerialHex(), strings.ToLower(c.lak.SerialHex)
		p.LAKSerial, p.LAKSerialPrevious = &ns, &prev
		m.LAK.Chain = out.LAK.DER()
		parts = append(parts, fmt.Sprintf("LAK %s (replacing %s, valid until %s)", ns, prev, out.LAK.Leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z")))
	}
	p.Identity = &m
	return fmt.Sprintf("Boot check of %s renewed its %s for the same TPM keys; the replaced serials stay accepted until the node presents the new ones, and are answered with them.",
		d.Name, strings.Join(parts, " and "))
}

// renewalRefusal is why a node whose check was recorded gets no renewal, or nil.
func renewalRefusal(d Device, outcome BootCheck) *Refusal {
	switch {
	case outcome != BootCheckOK:
		return Refuse(RefusedConflict, RenewRefusedDrift,
			"%s's boot differs from its baseline: certificates are renewed only after a boot that matches it; set desired_action=attest if the change was intended", d.Name)
	case d.Status != StatusActive:
		return Refuse(RefusedConflict, RenewRefusedNotActive,
			"%s's NetBox status is %s: certificates are renewed only for active devices; set the status to active if the node should run", d.Name, d.Status)
	case d.Declared.DesiredAction != ActionNone:
		return Refuse(RefusedConflict, RenewRefusedAction,
			"%s has desired_action=%s waiting: certificates are not renewed until the request is taken and ends", d.Name, d.Declared.DesiredAction)
	case len(d.Owned.Identity.LAK.Chain) == 0 || len(d.Owned.Identity.LDevID.Chain) == 0:
		return Refuse(RefusedConflict, RenewRefusedIdentity,
			"%s's fleet_identity holds no certificates to renew from: provision the device again", d.Name)
	case d.Owned.Identity.EKSHA256 == "" || !slices.ContainsFunc(d.Declared.EKHashes, func(h string) bool { return strings.EqualFold(h, d.Owned.Identity.EKSHA256) }):
		return Refuse(RefusedConflict, RenewRefusedEKChanged,
			"the EK %s's certificates were issued for (fleet_identity ek_sha256 %s) is not among its approved ek_sha256: certificates are not renewed for another TPM; provision the device again",
			d.Name, orNone(d.Owned.Identity.EKSHA256))
	}
	return nil
}

// provenLDevID verifies the node's proof that it holds the device's LDevID key: a certification
// by the AK that quoted (attest.VerifyLDevIDKey: the key profile, the AK's signature, the check's
// nonce), of the key fleetd issued the current LDevID for (fleet_identity's chain and public area).
func (s *BootChecks) provenLDevID(d Device, c *bootCheck) (crypto.PublicKey, *Refusal) {
	if c.ak == nil || c.ldevid == nil {
		return nil, Refuse(RefusedInvalid, RenewRefusedLDevIDProof, "the check carried no certification of the LDevID key: run a fleetd boot-check as new as fleetd")
	}
	v, err := attest.VerifyLDevIDKey(c.ak, c.nonce.Nonce, c.ldevid.Certification)
	if err != nil {
		return nil, Refuse(RefusedInvalid, RenewRefusedLDevIDProof, "the LDevID key's certification does not verify: %v", err)
	}
	cur, err := x509.ParseCertificate(d.Owned.Identity.LDevID.Chain[0])
	k, ok := v.Public.(interface{ Equal(crypto.PublicKey) bool })
	if err != nil || !ok || !k.Equal(cur.PublicKey) {
		return nil, Refuse(RefusedInvalid, RenewRefusedLDevIDProof,
			"the certified key is not the key of %s's LDevID: the node's ldevid.pub and ldevid.priv are not the ones its LDevID was issued for", d.Name)
	}
	if pub := d.Owned.Identity.LDevID.Public; len(pub) > 0 && !bytes.Equal(pub, c.ldevid.Certification.Public) {
		return nil, Refuse(RefusedInvalid, RenewRefusedLDevIDProof,
			"the certified key's public area is not the one %s's LDevID was issued for (fleet_identity)", d.Name)
	}
	return v.Public, nil
}

// renewFailed is fleetd's own failure to issue: logged in full, the node told to look there.
func (s *BootChecks) renewFailed(d Device, err error) Renewed {
	s.core.log.Error().Err(err).Str("device", d.Name).Str("step", "boot-check").Msg("renewal failed")
	return Renewed{Refused: RenewRefusedError, Message: "fleetd could not issue the renewed certificates; its log says why, and the next check tries again"}
}

// issued returns the certificate this check already issued for profile p, or issues it.
func (c *bootCheck) issued(p pki.Profile, issue func() (*pki.Certificate, error)) (*pki.Certificate, error) {
	if c.renewed == nil {
		c.renewed = map[pki.Profile]*pki.Certificate{}
	}
	if got, ok := c.renewed[p]; ok {
		return got, nil
	}
	got, err := issue()
	if err != nil {
		return nil, err
	}
	c.renewed[p] = got
	return got, nil
}

// renewalDetail is the decision log line's word on the renewal ("" when there was none).
func renewalDetail(r Renewed) string {
	var parts []string
	for _, c := range []struct {
		name        string
		cert        *pki.Certificate
		redelivered bool
	}{{"LDevID", r.LDevID, r.ldevidRedelivered}, {"LAK", r.LAK, r.lakRedelivered}} {
		switch {
		case c.redelivered:
			parts = append(parts, "redelivered "+c.name+" "+c.cert.SerialHex())
		case c.cert != nil:
			parts = append(parts, "renewed "+c.name+" "+c.cert.SerialHex())
		}
	}
	if r.Refused != "" {
		parts = append(parts, "not renewed ("+r.Refused+")")
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

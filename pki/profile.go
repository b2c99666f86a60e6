package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"
)

// OIDs of the TCG DevID profile and RFC 4108.
var (
	// OIDHardwareModuleName is id-on-hardwareModuleName, the SAN otherName naming the TPM.
	OIDHardwareModuleName = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 8, 4}
	// OIDHWTypeTPM20 is the TCG hwType of a TPM 2.0.
	OIDHWTypeTPM20 = asn1.ObjectIdentifier{2, 23, 133, 1, 2}
	// OIDSubjectAltName is the subjectAltName extension.
	OIDSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}
	// OIDAIKCertificate is the EKU tcg-kp-AIKCertificate, set on LAK certificates.
	OIDAIKCertificate = asn1.ObjectIdentifier{2, 23, 133, 8, 3}

	// Certificate policies tcg-cap-verifiedTPMResidency, -Fixed and -Restricted.
	PolicyVerifiedTPMResidency  = mustOID(2, 23, 133, 11, 1, 1)
	PolicyVerifiedTPMFixed      = mustOID(2, 23, 133, 11, 1, 2)
	PolicyVerifiedTPMRestricted = mustOID(2, 23, 133, 11, 1, 3)
)

func mustOID(arcs ...uint64) x509.OID {
	oid, err := x509.OIDFromInts(arcs)
	if err != nil {
		panic(err) // constant input
	}
	return oid
}

// clockSkew is how far before the issue time a certificate's validity starts, so a node whose
// clock is a little behind fleetd's accepts it.
const clockSkew = 5 * time.Minute

// Identity is who a device certificate names (docs/design.md §4). Every field comes from fleetd's own
// verified view: the NetBox device and the EK that attest/ approved.
type Identity struct {
	DeviceName   string // NetBox device name: the subject CN (required)
	DeviceSerial string // the device's serial: the subject serialNumber (omitted when empty)
	HWSerialNum  []byte // hwSerialNum of the hardwareModuleName SAN, derived from the EK (required)
}

// IssuerConfig wires an Issuer.
type IssuerConfig struct {
	LDevID, LAK                 *CA
	LDevIDLifetime, LAKLifetime time.Duration
	// LDevIDRenewAfter and LAKRenewAfter are each profile's renewal point: how old a certificate
	// may get before the boot check renews it (RenewalDue). Zero is half the lifetime; otherwise
	// it must be shorter than the lifetime.
	LDevIDRenewAfter, LAKRenewAfter time.Duration
	Rand                            io.Reader        // serial numbers (crypto/rand.Reader in production)
	Now                             func() time.Time // the clock
}

// Issuer issues LDevID and LAK certificates.
type Issuer struct {
	cfg IssuerConfig
}

// NewIssuer checks the configuration and returns an Issuer.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	switch {
	case cfg.LDevID == nil || cfg.LAK == nil:
		return nil, errors.New("new issuer: both the LDevID CA and the LAK CA are needed")
	case cfg.LDevIDLifetime <= 0 || cfg.LAKLifetime <= 0:
		return nil, errors.New("new issuer: certificate lifetimes must be positive")
	case cfg.Rand == nil || cfg.Now == nil:
		return nil, errors.New("new issuer: Rand and Now are needed")
	}
	if cfg.LDevIDRenewAfter == 0 {
		cfg.LDevIDRenewAfter = cfg.LDevIDLifetime / 2
	}
	if cfg.LAKRenewAfter == 0 {
		cfg.LAKRenewAfter = cfg.LAKLifetime / 2
	}
	if cfg.LDevIDRenewAfter < 0 || cfg.LDevIDRenewAfter >= cfg.LDevIDLifetime || cfg.LAKRenewAfter < 0 || cfg.LAKRenewAfter >= cfg.LAKLifetime {
		return nil, fmt.Errorf("new issuer: a renewal point must lie within the lifetime (LDevID %s of %s, LAK %s of %s)",
			cfg.LDevIDRenewAfter, cfg.LDevIDLifetime, cfg.LAKRenewAfter, cfg.LAKLifetime)
	}
	return &Issuer{cfg: cfg}, nil
}

// Profile names one of the two certificate profiles an Issuer issues.
type Profile string

const (
	ProfileLDevID Profile = "ldevid"
	ProfileLAK    Profile = "lak"
)

// RenewalDue reports whether cert, a certificate of profile p this fleet issued, has passed its
// renewal point now: it is at least renew_after old, or what is left of it is at most what the
// profile leaves after its renewal point (lifetime - renew_after). The second test renews in
// time a certificate issued under a longer lifetime than today's; the first, one issued under a
// shorter one. A certificate is not due when one issued now would be capped by the CA's own
// expiry at no later than its own end (renewing it every hour would gain nothing).
func (i *Issuer) RenewalDue(p Profile, cert *x509.Certificate) bool {
	ca, lifetime, after := i.profile(p)
	now := i.cfg.Now()
	age := now.Sub(cert.NotBefore.Add(clockSkew))
	left := cert.NotAfter.Sub(now)
	if now.Add(lifetime).After(ca.Cert.NotAfter) && !ca.Cert.NotAfter.After(cert.NotAfter) {
		return false // a new certificate would be capped at the CA's NotAfter, where this one ends
	}
	return age >= after || left <= lifetime-after
}

// RenewalPoint is the time from which RenewalDue reports cert due, for the node's log and the
// journal (the earlier of its two tests).
func (i *Issuer) RenewalPoint(p Profile, cert *x509.Certificate) time.Time {
	_, lifetime, after := i.profile(p)
	byAge := cert.NotBefore.Add(clockSkew + after)
	byLeft := cert.NotAfter.Add(-(lifetime - after))
	if byLeft.Before(byAge) {
		return byLeft
	}
	return byAge
}

// Lifetimes is profile p's certificate lifetime and renewal point (IssuerConfig).
func (i *Issuer) Lifetimes(p Profile) (lifetime, renewAfter time.Duration) {
	_, lifetime, renewAfter = i.profile(p)
	return lifetime, renewAfter
}

func (i *Issuer) profile(p Profile) (*CA, time.Duration, time.Duration) {
	if p == ProfileLAK {
		return i.cfg.LAK, i.cfg.LAKLifetime, i.cfg.LAKRenewAfter
	}
	return i.cfg.LDevID, i.cfg.LDevIDLifetime, i.cfg.LDevIDRenewAfter
}

// RenewIdentity is the identity a renewal issues for: the device as NetBox names it now, and the
// hwSerialNum of the certificate being renewed, which fleetd derived from the EK it approved at
// the enrollment (the boot check has no EK to derive it again). cert must be one this fleet
// issued.
func RenewIdentity(deviceName, deviceSerial string, cert *x509.Certificate) (Identity, error) {
	_, hw, _, err := HardwareModuleName(cert)
	if err != nil {
		return Identity{}, fmt.Errorf("read the hwSerialNum of the certificate to renew: %w", err)
	}
	return Identity{DeviceName: deviceName, DeviceSerial: deviceSerial, HWSerialNum: hw}, nil
}

// Certificate is an issued leaf and the chain it is sent with (issuing CA and intermediates).
type Certificate struct {
	Leaf  *x509.Certificate
	Chain []*x509.Certificate
}

// PEM is the leaf then its chain, as ldevid.pem and lak.pem hold them (docs/design.md §4).
func (c *Certificate) PEM() []byte {
	return EncodeCertificatesPEM(append([]*x509.Certificate{c.Leaf}, c.Chain...)...)
}

// DER is the leaf then its chain, DER-encoded.
func (c *Certificate) DER() [][]byte {
	out := [][]byte{c.Leaf.Raw}
	for _, x := range c.Chain {
		out = append(out, x.Raw)
	}
	return out
}

// SerialHex is the leaf's serial number in lowercase hex, as NetBox's ldevid_serial and
// lak_serial hold it.
func (c *Certificate) SerialHex() string {
	return hex.EncodeToString(c.Leaf.SerialNumber.Bytes())
}

// IssueLDevID issues the LDevID certificate for a TPM-resident signing key that the device's AK
// certified (attest.VerifiedLDevIDKey). Profile: subject CN and serialNumber, non-critical SAN
// hardwareModuleName, keyUsage digitalSignature only, CA:false, policies verifiedTPMResidency and
// verifiedTPMFixed. SPIRE's tpm_devid accepts it because the subject is non-empty and the SAN is
// therefore not critical (a critical otherName-only SAN is an unhandled critical extension for
// Go's verifier).
func (i *Issuer) IssueLDevID(id Identity, pub crypto.PublicKey) (*Certificate, error) {
	tmpl := &x509.Certificate{
		Policies: []x509.OID{PolicyVerifiedTPMResidency, PolicyVerifiedTPMFixed},
	}
	c, err := i.issue(i.cfg.LDevID, i.cfg.LDevIDLifetime, tmpl, id, pub)
	if err != nil {
		return nil, fmt.Errorf("issue LDevID for %s: %w", id.DeviceName, err)
	}
	return c, nil
}

// IssueLAK issues the LAK certificate for the device's attestation key, after credential
// activation proved it lives in the TPM of the approved EK (attest.VerifiedAK). Profile: the
// LDevID's identity and key usage, policies verifiedTPMResidency and verifiedTPMRestricted, and
// the EKU tcg-kp-AIKCertificate.
func (i *Issuer) IssueLAK(id Identity, pub crypto.PublicKey) (*Certificate, error) {
	tmpl := &x509.Certificate{
		Policies:           []x509.OID{PolicyVerifiedTPMResidency, PolicyVerifiedTPMRestricted},
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{OIDAIKCertificate},
	}
	c, err := i.issue(i.cfg.LAK, i.cfg.LAKLifetime, tmpl, id, pub)
	if err != nil {
		return nil, fmt.Errorf("issue LAK for %s: %w", id.DeviceName, err)
	}
	return c, nil
}

func (i *Issuer) issue(ca *CA, lifetime time.Duration, tmpl *x509.Certificate, id Identity, pub crypto.PublicKey) (*Certificate, error) {
	if id.DeviceName == "" || len(id.HWSerialNum) == 0 {
		return nil, errors.New("the identity needs a device name and an EK-derived hwSerialNum")
	}
	if err := checkKey(pub); err != nil {
		return nil, err
	}
	san, err := hardwareModuleNameSAN(id.HWSerialNum)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial(i.cfg.Rand)
	if err != nil {
		return nil, err
	}
	now := i.cfg.Now()
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter // a certificate never outlives its CA
	}
	tmpl.SerialNumber = serial
	tmpl.Subject = pkix.Name{CommonName: id.DeviceName, SerialNumber: id.DeviceSerial}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-clockSkew), notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, false
	tmpl.ExtraExtensions = []pkix.Extension{san}
	der, err := x509.CreateCertificate(i.cfg.Rand, tmpl, ca.Cert, pub, ca.Signer)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse the certificate just signed: %w", err)
	}
	return &Certificate{Leaf: leaf, Chain: ca.Chain()}, nil
}

// checkKey accepts the key types a TPM-resident LDevID or AK can have.
func checkKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA key on curve %s: P-256 or P-384 expected", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits: at least 2048 expected", k.N.BitLen())
		}
	default:
		return fmt.Errorf("key type %T cannot be certified", pub)
	}
	return nil
}

// newSerial draws a positive 128-bit serial number (the TCG profile and RFC 5280 ask for a
// unique positive serial of at most 20 bytes; 64 random bits is the usual floor).
func newSerial(rnd io.Reader) (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return nil, fmt.Errorf("draw a serial number: %w", err)
	}
	b[0] &= 0x7f
	b[0] |= 0x40 // never zero, always 16 bytes long
	return new(big.Int).SetBytes(b), nil
}

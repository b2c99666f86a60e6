package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-attestation/attest"
)

// EKPolicy is the fleet's rule for EKs (docs/design.md §4).
type EKPolicy string

const (
	// EKPolicyHash approves an EK by the SHA-256 of its public key alone.
	EKPolicyHash EKPolicy = "hash"
	// EKPolicyHashCert also requires an EK certificate that chains to the manufacturer CA bundle
	// and is for the EK, unless the device is declared as having none (EKApproval.NoCertificate):
	// an approved EK that merely omits its certificate is refused, or the chain check could be
	// skipped by not sending it.
	EKPolicyHashCert EKPolicy = "hash+cert"
)

// EKVerifierConfig configures an EKVerifier.
type EKVerifierConfig struct {
	Policy EKPolicy
	// BundlePEM holds the manufacturer CAs EK certificates must chain to: the roots and the
	// CAs that issue EK certificates. Like SPIRE's tpm_devid, no intermediates pool is built
	// from what the machine sends, so the issuing CA must be in the bundle. Needed for hash+cert.
	BundlePEM []byte
	Now       func() time.Time
}

// EKVerifier approves endorsement keys.
type EKVerifier struct {
	policy EKPolicy
	roots  *x509.CertPool
	now    func() time.Time
}

// NewEKVerifier checks the policy and parses the bundle.
func NewEKVerifier(cfg EKVerifierConfig) (*EKVerifier, error) {
	if cfg.Now == nil {
		return nil, errors.New("new EK verifier: Now is needed")
	}
	v := &EKVerifier{policy: cfg.Policy, now: cfg.Now, roots: x509.NewCertPool()}
	switch cfg.Policy {
	case EKPolicyHash:
	case EKPolicyHashCert:
		n, err := addPEMCerts(v.roots, cfg.BundlePEM)
		if err != nil {
			return nil, fmt.Errorf("new EK verifier: read the manufacturer CA bundle: %w", err)
		}
		if n == 0 {
			return nil, errors.New("new EK verifier: policy hash+cert needs a manufacturer CA bundle with at least one certificate")
		}
	default:
		return nil, fmt.Errorf("new EK verifier: policy %q is neither %q nor %q", cfg.Policy, EKPolicyHash, EKPolicyHashCert)
	}
	return v, nil
}

// Policy is the fleet's EK policy the verifier applies.
func (v *EKVerifier) Policy() EKPolicy { return v.policy }

func addPEMCerts(pool *x509.CertPool, b []byte) (int, error) {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n, nil
		}
		if blk.Type != "CERTIFICATE" {
			return n, fmt.Errorf("unexpected PEM block %q", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return n, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
}

// VerifiedEK is an endorsement key the device's owner approved (and, under hash+cert, whose
// certificate chains to a manufacturer CA).
type VerifiedEK struct {
	Public crypto.PublicKey
	// SHA256 is the lowercase hex SHA-256 of the EK's DER SubjectPublicKeyInfo, as ek_sha256 holds it.
	SHA256 string
	// Cert is the EK certificate, nil when the TPM has none; CertVerified says whether its chain
	// was checked (hash+cert) or it was only checked to be for the EK (hash).
	Cert         *x509.Certificate
	CertVerified bool
	// Manufacturer is the TPM manufacturer code from the certificate's SAN (e.g. "00001014").
	Manufacturer string
	// Spec is the TPM specification the certificate names (tcg-at-tpmSpecification); zero when
	// it names none.
	Spec TPMSpec
	// HWSerialNum is the LDevID/LAK SAN's hwSerialNum (TCG DevID profile): the ASCII
	// "<manufacturer>:<EK cert authorityKeyId hex>:<EK cert serial hex>" (lowercase hex) when a
	// certificate with those fields exists, else the 32-byte SHA-256 of the EK's SPKI.
	HWSerialNum []byte
}

// TPMVersion is the TPM version an accepted enrollment with this EK proves (docs/design.md,
// "Attested facts"): "2.0", since fleetd verifies only TPM 2.0's attestation — the AK's
// creation attestation (a TPMS_ATTEST with TPM_GENERATED_VALUE, go-attestation's
// CheckAKParameters), TPM2_ActivateCredential under this EK, and TPM2_Quote — which a TPM 1.2
// cannot answer. When the certificate's chain was verified and it names a TPM 2.0 specification,
// the manufacturer's level and revision follow ("2.0 level 0 revision 1.64"); a certificate that
// names another family adds nothing, since the protocol, not the certificate, shows the family.
// Proved only once the enrollment's activation and quote verified: before, it is what the EK
// would prove.
func (ek *VerifiedEK) TPMVersion() string {
	if ek.CertVerified && ek.Spec.Family == TPMVersion20 {
		return ek.Spec.String()
	}
	return TPMVersion20
}

// EKApproval is what the device's owner declared in NetBox about its EK.
type EKApproval struct {
	SHA256 []string // the device's ek_sha256 entries
	// NoCertificate is the declaration that the TPM has no EK certificate (ek_certificate: none,
	// docs/netbox.md): only then does hash+cert approve an EK by its hash alone.
	NoCertificate bool
}

// Verify approves the EK a machine claims: claimedPublicDER is its DER SubjectPublicKeyInfo,
// claimedCertDER the certificate from NV 0x01c00002 (nil when there is none), approved the
// device's declaration from NetBox. The refusals name only fleetd's own values and the EK's
// hash, never the declared list (the caller is unauthenticated).
func (v *EKVerifier) Verify(claimedPublicDER, claimedCertDER []byte, approved EKApproval) (*VerifiedEK, error) {
	pub, err := x509.ParsePKIXPublicKey(claimedPublicDER)
	if err != nil {
		return nil, refuseErr(CheckEKMalformed, err, "the EK public key is not a DER SubjectPublicKeyInfo")
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, refuse(CheckEKMalformed, "the EK is an RSA key of %d bits; at least 2048 are needed", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
	default:
		return nil, refuse(CheckEKMalformed, "the EK is a %T; an RSA or ECC key is needed", pub)
	}
	sum := sha256.Sum256(claimedPublicDER)
	ek := &VerifiedEK{Public: pub, SHA256: hex.EncodeToString(sum[:]), HWSerialNum: sum[:]}
	if !slices.ContainsFunc(approved.SHA256, func(h string) bool { return strings.EqualFold(strings.TrimSpace(h), ek.SHA256) }) {
		return nil, refuse(CheckEKApproved, "the EK's SHA-256 %s is not among the device's %d approved ek_sha256 entries",
			ek.SHA256, len(approved.SHA256))
	}
	if len(claimedCertDER) == 0 {
		if v.policy == EKPolicyHashCert && !approved.NoCertificate {
			return nil, refuse(CheckEKCertMissing, "the fleet's EK policy is hash+cert and the machine sent no EK certificate; "+
				"if its TPM truly has none, declare ek_certificate: none on the device in NetBox")
		}
		return ek, nil
	}
	if err := v.checkCert(ek, claimedCertDER); err != nil {
		return nil, err
	}
	return ek, nil
}

// checkCert parses the EK certificate, checks that it is for the EK, verifies its chain under
// hash+cert, and derives the hwSerialNum from it.
func (v *EKVerifier) checkCert(ek *VerifiedEK, claimedCertDER []byte) error {
	cert, err := attest.ParseEKCertificate(claimedCertDER)
	if err != nil {
		return refuseErr(CheckEKMalformed, err, "the EK certificate does not parse")
	}
	if k, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(ek.Public) {
		return refuse(CheckEKCertKey, "the EK certificate (serial %x, issuer %q) is for another key than the EK %s",
			cert.SerialNumber, cert.Issuer.String(), ek.SHA256)
	}
	ek.Cert = cert
	if v.policy == EKPolicyHashCert {
		if err := v.verifyChain(cert); err != nil {
			return err
		}
		ek.CertVerified = true
	}
	ek.Manufacturer, ek.Spec = tpmManufacturer(cert), tpmSpec(cert)
	if ek.Manufacturer != "" && len(cert.AuthorityKeyId) > 0 {
		ek.HWSerialNum = fmt.Appendf(nil, "%s:%x:%x", ek.Manufacturer, cert.AuthorityKeyId, cert.SerialNumber.Bytes())
	}
	return nil
}

// verifyChain verifies the EK certificate against the bundle. The TCG EK profile puts the TPM's
// identity in a critical SAN that holds only a directoryName, which Go leaves in
// UnhandledCriticalExtensions; it is removed on a copy before verifying (as SPIRE, go-tpm-tools
// and step-ca do). EK certificates carry the EKU tcg-kp-EKCertificate, so any EKU is accepted.
func (v *EKVerifier) verifyChain(cert *x509.Certificate) error {
	c := *cert
	c.UnhandledCriticalExtensions = slices.DeleteFunc(slices.Clone(c.UnhandledCriticalExtensions),
		func(oid asn1OID) bool { return oid.Equal(oidSubjectAltName) })
	_, err := c.Verify(x509.VerifyOptions{
		Roots:       v.roots,
		CurrentTime: v.now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return refuseErr(CheckEKCertChain, err, "the EK certificate (issuer %q, serial %x) does not chain to the manufacturer CA bundle",
			cert.Issuer.String(), cert.SerialNumber)
	}
	return nil
}

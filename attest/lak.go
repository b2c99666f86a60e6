package attest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/go-attestation/attest"
)

// The boot check's key (docs/design.md §5): a node signs its hourly quote with the AK fleetd certified at
// enrollment, and presents the LAK certificate fleetd issued for it. The certificate is public
// (lak.pem is world-readable on the node), so it names the device but proves nothing by itself;
// possession of the AK is proven by the quote signature, which VerifyPlatform checks under the
// VerifiedAK this file returns.

// The boot-check refusals of the LAK certificate.
const (
	CheckLAKMalformed Check = "lak_malformed" // no certificate, or one that does not parse
	CheckLAKUntrusted Check = "lak_untrusted" // not a LAK issued by the fleet's LAK CA, or expired
	CheckLAKMismatch  Check = "lak_mismatch"  // the AK that quoted is not the key the LAK certifies
)

// oidAIKCertificate is the EKU tcg-kp-AIKCertificate that fleetd's LAK profile sets (pki).
var oidAIKCertificate = asn1.ObjectIdentifier{2, 23, 133, 8, 3}

// LAKVerifierConfig configures a LAKVerifier with the fleet's LAK CA (pki.lak.cert).
type LAKVerifierConfig struct {
	// Issuer is the CA that issues LAK certificates: a LAK must be signed by it directly.
	Issuer *x509.Certificate
	// Above are the certificates above Issuer up to the root, as the CA file holds them; the
	// last one is the trust anchor (Issuer itself when Above is empty).
	Above []*x509.Certificate
	Now   func() time.Time
}

// LAKVerifier checks LAK certificates against the fleet's LAK CA. It builds chains only from the
// CA certificates fleetd was configured with, never from certificates a node sends, and it
// requires the leaf to be issued by the LAK issuing CA itself: a certificate from another CA
// under the same root (an LDevID, whose key is not restricted and could sign a forged quote)
// is refused.
//
// A node presents the same certificate every hour until it is renewed, so the verifier keeps the
// certificates it verified (at most lakCacheSize, keyed by the leaf's SHA-256) with the span in
// which their whole chain is valid: a certificate seen again within that span is not parsed and
// chained again. Any other certificate, a renewed one included, is a miss and is verified in
// full, and so is a known one outside its span (to say why it is refused).
type LAKVerifier struct {
	issuer *x509.Certificate
	roots  *x509.CertPool
	inter  *x509.CertPool
	now    func() time.Time

	mu     sync.Mutex
	leaves map[[sha256.Size]byte]verifiedLeaf
}

// lakCacheSize bounds the LAK certificates a verifier remembers: one per node, with room for
// the renewed ones. Past it, an arbitrary one is forgotten and verified in full when seen again.
const lakCacheSize = 2048

// verifiedLeaf is a LAK certificate that verified, and the span its chain is valid in.
type verifiedLeaf struct {
	lak                 *VerifiedLAK
	notBefore, notAfter time.Time
}

// NewLAKVerifier checks the configuration and returns a verifier.
func NewLAKVerifier(cfg LAKVerifierConfig) (*LAKVerifier, error) {
	if cfg.Issuer == nil || cfg.Now == nil {
		return nil, errors.New("new LAK verifier: the issuing CA certificate and Now are needed")
	}
	if !cfg.Issuer.IsCA {
		return nil, fmt.Errorf("new LAK verifier: certificate %q is not a CA", cfg.Issuer.Subject)
	}
	v := &LAKVerifier{issuer: cfg.Issuer, roots: x509.NewCertPool(), inter: x509.NewCertPool(), now: cfg.Now,
		leaves: map[[sha256.Size]byte]verifiedLeaf{}}
	chain := append([]*x509.Certificate{cfg.Issuer}, cfg.Above...)
	for _, c := range chain[:len(chain)-1] {
		v.inter.AddCert(c)
	}
	v.roots.AddCert(chain[len(chain)-1])
	return v, nil
}

// VerifiedLAK is a LAK certificate fleetd's LAK CA issued, valid now. It names the device and
// the certified key; it does not prove that the caller holds the key.
type VerifiedLAK struct {
	Device    string // the subject CN: the NetBox device name the LAK was issued to
	SerialHex string // the serial, lowercase hex as NetBox's lak_serial holds it
	Public    crypto.PublicKey
	Cert      *x509.Certificate // the verified leaf (its validity decides the renewal point)
}

// Verify checks a claimed LAK certificate chain (DER, leaf first, as lak.pem holds it): the leaf
// must parse, be issued by the LAK issuing CA, chain to the configured root, be valid now, and
// carry the tcg-kp-AIKCertificate EKU. Certificates after the leaf are ignored: the chain is
// built from fleetd's own CA file. The VerifiedLAK may be shared with other calls: read it only.
func (v *LAKVerifier) Verify(claimedChain [][]byte) (*VerifiedLAK, error) {
	if len(claimedChain) == 0 || len(claimedChain[0]) == 0 {
		return nil, refuse(CheckLAKMalformed, "no LAK certificate was sent (lak_chain is empty)")
	}
	key := sha256.Sum256(claimedChain[0])
	now := v.now()
	v.mu.Lock()
	known, ok := v.leaves[key]
	v.mu.Unlock()
	if ok && !now.Before(known.notBefore) && !now.After(known.notAfter) {
		return known.lak, nil
	}
	lak, chain, err := v.verify(claimedChain[0], now)
	if err != nil {
		return nil, err
	}
	e := verifiedLeaf{lak: lak, notBefore: lak.Cert.NotBefore, notAfter: lak.Cert.NotAfter}
	for _, c := range chain {
		if c.NotBefore.After(e.notBefore) {
			e.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(e.notAfter) {
			e.notAfter = c.NotAfter
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.leaves) >= lakCacheSize {
		for k := range v.leaves { // map order: an arbitrary certificate
			delete(v.leaves, k)
			break
		}
	}
	v.leaves[key] = e
	return lak, nil
}

// verify is Verify in full, at now; it returns the chain the leaf verified through.
func (v *LAKVerifier) verify(der []byte, now time.Time) (*VerifiedLAK, []*x509.Certificate, error) {
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, refuseErr(CheckLAKMalformed, err, "the LAK certificate does not parse")
	}
	serial := hex.EncodeToString(leaf.SerialNumber.Bytes())
	if !bytes.Equal(leaf.RawIssuer, v.issuer.RawSubject) {
		return nil, nil, refuse(CheckLAKUntrusted, "the certificate (serial %s) was issued by %q, not by the fleet's LAK CA %q",
			serial, leaf.Issuer, v.issuer.Subject)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: v.inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		if now.After(leaf.NotAfter) {
			return nil, nil, refuseErr(CheckLAKUntrusted, err, "the LAK certificate (serial %s) expired at %s: attest the device again for a new one",
				serial, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		return nil, nil, refuseErr(CheckLAKUntrusted, err, "the certificate (serial %s) does not chain to the fleet's LAK CA", serial)
	}
	if !slices.ContainsFunc(leaf.UnknownExtKeyUsage, oidAIKCertificate.Equal) {
		return nil, nil, refuse(CheckLAKUntrusted, "the certificate (serial %s) is not a LAK: it lacks the tcg-kp-AIKCertificate key usage", serial)
	}
	if leaf.Subject.CommonName == "" {
		return nil, nil, refuse(CheckLAKUntrusted, "the LAK certificate (serial %s) names no device (empty subject CN)", serial)
	}
	return &VerifiedLAK{Device: leaf.Subject.CommonName, SerialHex: serial, Public: leaf.PublicKey, Cert: leaf}, chains[0], nil
}

// AK returns the attestation key the LAK certifies, for VerifyPlatform, after checking that the
// AK public area the node sent (TPMT_PUBLIC, which go-attestation reads the signing hash from)
// holds the certified key and is a restricted signing key. fleetd issued the LAK only after
// credential activation proved the AK lives in the device's TPM (docs/design.md §4), so the certified key
// is a VerifiedAK.
func (l *VerifiedLAK) AK(claimedAKPublic []byte) (*VerifiedAK, error) {
	if _, err := checkKeyAttributes(claimedAKPublic, akAttributes, CheckLAKMismatch, "AK"); err != nil {
		return nil, err
	}
	pub, err := attest.ParseAKPublic(claimedAKPublic)
	if err != nil {
		return nil, refuseErr(CheckLAKMismatch, err, "the AK public area does not parse")
	}
	k, ok := pub.Public.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !k.Equal(l.Public) {
		return nil, refuse(CheckLAKMismatch, "the AK that quoted is not the key of LAK certificate %s", l.SerialHex)
	}
	return &VerifiedAK{Public: l.Public, Hash: pub.Hash, PublicArea: bytes.Clone(claimedAKPublic)}, nil
}

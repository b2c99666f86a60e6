package attest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
)

// NonceSize is the size of the server nonce a quote and the LDevID certification carry. 32 bytes
// fit every TPM 2.0's TPM2B_DATA (at least the size of a SHA-256 digest).
const NonceSize = 32

// NewNonce draws a fresh server nonce.
func NewNonce(rnd io.Reader) ([]byte, error) {
	n := make([]byte, NonceSize)
	if _, err := io.ReadFull(rnd, n); err != nil {
		return nil, fmt.Errorf("draw nonce: %w", err)
	}
	return n, nil
}

// AKChallenge is the credential-activation challenge for a claimed AK: Credential goes to the
// machine; Secret and AKDigest go only into the sealed token.
type AKChallenge struct {
	Credential attest.EncryptedCredential
	Secret     []byte
	AKDigest   []byte // SHA-256 of the AK's TPMT_PUBLIC
}

// NewAKChallenge checks a claimed AK and makes a credential-activation challenge that only the
// TPM holding both the AK and the approved EK can answer (TPM2_MakeCredential semantics). The
// AK must be a restricted signing key that is fixedTPM, fixedParent and sensitiveDataOrigin,
// with a TPM-signed creation attestation (go-attestation's CheckAKParameters); the attributes
// are checked here first so that a refusal says which one is missing.
func NewAKChallenge(ek *VerifiedEK, claimed attest.AttestationParameters, rnd io.Reader) (*AKChallenge, error) {
	if _, err := checkKeyAttributes(claimed.Public, akAttributes, CheckAK, "AK"); err != nil {
		return nil, err
	}
	p := attest.ActivationParameters{EK: ek.Public, AK: claimed, Rand: rnd}
	secret, ec, err := p.Generate() // runs CheckAKParameters first
	if err != nil {
		// Tell the AK's fault (a refusal) from fleetd's (randomness, an EK type it cannot use).
		if cerr := p.CheckAKParameters(); cerr != nil {
			return nil, refuseErr(CheckAK, cerr, "the AK's creation attestation does not verify")
		}
		return nil, fmt.Errorf("make credential-activation challenge for EK %s: %w", ek.SHA256, err)
	}
	sum := sha256.Sum256(claimed.Public)
	return &AKChallenge{Credential: *ec, Secret: secret, AKDigest: sum[:]}, nil
}

// VerifiedAK is an attestation key proven to live in the TPM of the approved EK.
type VerifiedAK struct {
	Public crypto.PublicKey
	Hash   crypto.Hash // the hash its quotes are signed with
	// PublicArea is its TPMT_PUBLIC, which a wipe receipt's token carries so that the receipt's
	// quote is verified under this key (receipt.go).
	PublicArea []byte
}

// VerifyActivation compares the secret the machine recovered with ActivateCredential to the one
// in the token (in constant time). Success proves the AK whose public the machine presents is
// the AK the challenge was made for, and that it sits in the same TPM as the approved EK.
func VerifyActivation(tok *Token, claimedSecret, claimedAKPublic []byte) (*VerifiedAK, error) {
	c := tok.Claims()
	sum := sha256.Sum256(claimedAKPublic)
	if subtle.ConstantTimeCompare(sum[:], c.AKDigest) != 1 {
		return nil, refuse(CheckTokenBinding, "the AK presented is not the AK the challenge was made for")
	}
	if subtle.ConstantTimeCompare(claimedSecret, c.Secret) != 1 {
		return nil, refuse(CheckActivation, "the activated secret is wrong: the AK is not in the TPM of EK %s", c.EKSHA256)
	}
	pub, err := attest.ParseAKPublic(claimedAKPublic)
	if err != nil {
		return nil, refuseErr(CheckAK, err, "the AK public area does not parse")
	}
	return &VerifiedAK{Public: pub.Public, Hash: pub.Hash, PublicArea: bytes.Clone(claimedAKPublic)}, nil
}

// keyAttributes is a required profile of TPMA_OBJECT bits.
type keyAttributes struct {
	set, clear []attrName
}

type attrName struct {
	flag tpm2.KeyProp
	name string
}

var (
	attrFixedTPM     = attrName{tpm2.FlagFixedTPM, "fixedTPM"}
	attrFixedParent  = attrName{tpm2.FlagFixedParent, "fixedParent"}
	attrSensitive    = attrName{tpm2.FlagSensitiveDataOrigin, "sensitiveDataOrigin"}
	attrUserWithAuth = attrName{tpm2.FlagUserWithAuth, "userWithAuth"}
	attrRestricted   = attrName{tpm2.FlagRestricted, "restricted"}
	attrSign         = attrName{tpm2.FlagSign, "sign"}
	attrDecrypt      = attrName{tpm2.FlagDecrypt, "decrypt"}

	// An AK signs only TPM-generated structures (quotes, certifications) and cannot leave the TPM.
	akAttributes = keyAttributes{
		set:   []attrName{attrRestricted, attrSign, attrFixedTPM, attrFixedParent, attrSensitive},
		clear: []attrName{attrDecrypt},
	}
	// An LDevID signs anything SPIRE asks (not restricted), with password authorization
	// (userWithAuth), and cannot leave the TPM (TCG DevID §7.3.4.1, SPIRE's DevID template).
	ldevidAttributes = keyAttributes{
		set:   []attrName{attrSign, attrFixedTPM, attrFixedParent, attrSensitive, attrUserWithAuth},
		clear: []attrName{attrRestricted, attrDecrypt},
	}
)

// checkKeyAttributes decodes a TPMT_PUBLIC and refuses it when an attribute of the profile is
// missing or one that must be clear is set, naming them.
func checkKeyAttributes(public []byte, want keyAttributes, c Check, what string) (tpm2.Public, error) {
	pub, err := tpm2.DecodePublic(public)
	if err != nil {
		return pub, refuseErr(c, err, "the %s public area is not a TPMT_PUBLIC", what)
	}
	var missing, extra []string
	for _, a := range want.set {
		if pub.Attributes&a.flag == 0 {
			missing = append(missing, a.name)
		}
	}
	for _, a := range want.clear {
		if pub.Attributes&a.flag != 0 {
			extra = append(extra, a.name)
		}
	}
	switch {
	case len(missing) > 0 && len(extra) > 0:
		return pub, refuse(c, "the %s is not %s and is %s (attributes 0x%08x)", what, strings.Join(missing, ", "), strings.Join(extra, ", "), uint32(pub.Attributes))
	case len(missing) > 0:
		return pub, refuse(c, "the %s is not %s (attributes 0x%08x)", what, strings.Join(missing, ", "), uint32(pub.Attributes))
	case len(extra) > 0:
		return pub, refuse(c, "the %s must not be %s (attributes 0x%08x)", what, strings.Join(extra, ", "), uint32(pub.Attributes))
	}
	return pub, nil
}

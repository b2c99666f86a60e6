package attest

import (
	"bytes"
	"crypto"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
)

// VerifiedLDevIDKey is a TPM-resident signing key the verified AK certified for this enrollment.
type VerifiedLDevIDKey struct {
	Public crypto.PublicKey
}

// VerifyLDevIDKey verifies the certification of the LDevID key (docs/design.md §4): the key profile SPIRE's
// tpm_devid agent can use (ECC P-256, ECDSA with SHA-256, name algorithm SHA-256; sign,
// fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth; not restricted, not decrypt); a
// TPM2_Certify by the verified AK (go-attestation's CertificationParameters.Verify); and the
// certification's qualifying data equal to the enrollment nonce, which go-attestation leaves to
// its caller and which makes the certification fresh.
func VerifyLDevIDKey(ak *VerifiedAK, nonce []byte, claimed attest.CertificationParameters) (*VerifiedLDevIDKey, error) {
	pub, err := checkKeyAttributes(claimed.Public, ldevidAttributes, CheckLDevID, "LDevID key")
	if err != nil {
		return nil, err
	}
	if pub.Type != tpm2.AlgECC || pub.ECCParameters == nil || pub.ECCParameters.CurveID != tpm2.CurveNISTP256 ||
		pub.ECCParameters.Sign == nil || pub.ECCParameters.Sign.Alg != tpm2.AlgECDSA || pub.ECCParameters.Sign.Hash != tpm2.AlgSHA256 ||
		pub.NameAlg != tpm2.AlgSHA256 {
		return nil, refuse(CheckLDevID, "the LDevID key is not an ECC P-256 key with the ECDSA-SHA256 scheme and SHA-256 names (type 0x%x, name alg 0x%x)", uint16(pub.Type), uint16(pub.NameAlg))
	}
	if err := claimed.Verify(attest.VerifyOpts{Public: ak.Public, Hash: ak.Hash}); err != nil {
		return nil, refuseErr(CheckLDevID, err, "the LDevID key's certification does not verify under the AK")
	}
	att, err := tpm2.DecodeAttestationData(claimed.CreateAttestation)
	if err != nil {
		return nil, refuseErr(CheckLDevID, err, "the LDevID certification is not a TPMS_ATTEST")
	}
	if !bytes.Equal(att.ExtraData, nonce) {
		return nil, refuse(CheckLDevID, "the LDevID key was certified with qualifying data %x, not this enrollment's nonce %x", []byte(att.ExtraData), nonce)
	}
	key, err := pub.Key()
	if err != nil {
		return nil, refuseErr(CheckLDevID, err, "the LDevID public key is not usable")
	}
	return &VerifiedLDevIDKey{Public: key}, nil
}

package agent

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
)

// TPM is the machine side of an enrollment: the TPM operations `fleetd enroll` runs, over
// go-attestation's client. The AK is a child of go-attestation's default SRK (RSA, persisted at
// 0x81000001, created there when missing), so the boot check reloads it from lak.blob with
// attest.TPM.LoadAK. The LDevID is a child of the SRK SPIRE's tpm_devid agent recreates for every
// session (see SRKTemplateHighECC), so SPIRE can load ldevid.pub/ldevid.priv unchanged.
type TPM struct {
	ch  attest.CommandChannelTPM20
	tpm *attest.TPM
}

// OpenTPM opens go-attestation's client on a command channel (tpmconn.Open). Close releases it.
func OpenTPM(ch attest.CommandChannelTPM20) (*TPM, error) {
	t, err := attest.OpenTPM(&attest.OpenConfig{CommandChannel: ch})
	if err != nil {
		return nil, fmt.Errorf("open TPM: %w", err)
	}
	return &TPM{ch: ch, tpm: t}, nil
}

// Close closes the command channel.
func (t *TPM) Close() error { return t.tpm.Close() }

// Attest is the go-attestation client, for operations this type does not wrap.
func (t *TPM) Attest() *attest.TPM { return t.tpm }

// EK returns the RSA EK's DER SubjectPublicKeyInfo and its certificate from NV 0x01c00002 (nil
// when the TPM has none; the EK is then the TCG default-template key at 0x81010001, created and
// persisted on first use). SPIRE's tpm_devid also uses this RSA EK.
func (t *TPM) EK() (publicDER, certDER []byte, err error) {
	eks, err := t.tpm.EKs()
	if err != nil {
		return nil, nil, fmt.Errorf("read EK: %w", err)
	}
	if len(eks) == 0 {
		return nil, nil, errors.New("read EK: the TPM reports no RSA EK")
	}
	publicDER, err = x509.MarshalPKIXPublicKey(eks[0].Public)
	if err != nil {
		return nil, nil, fmt.Errorf("encode EK public key: %w", err)
	}
	if eks[0].Certificate != nil {
		certDER = eks[0].Certificate.Raw
	}
	return publicDER, certDER, nil
}

// NewAK creates a fresh RSA-2048 restricted signing AK with its creation attestation. It stays
// loaded until Close.
func (t *TPM) NewAK() (*attest.AK, error) {
	ak, err := t.tpm.NewAK(nil)
	if err != nil {
		return nil, fmt.Errorf("create AK: %w", err)
	}
	return ak, nil
}

// ActivateCredential recovers fleetd's secret from the credential-activation challenge, which
// only the TPM holding both the AK and the EK can do.
func (t *TPM) ActivateCredential(ak *attest.AK, ec attest.EncryptedCredential) ([]byte, error) {
	secret, err := ak.ActivateCredential(t.tpm, ec)
	if err != nil {
		return nil, fmt.Errorf("activate credential: %w", err)
	}
	return secret, nil
}

// AttestPlatform quotes the PCRs with the nonce and attaches the event log (read from the
// channel's log file, or eventLog when it is not nil). fleetd replays only the SHA-256 bank
// (docs/design.md §5) and verifies every quote it is sent, so only the SHA-256 bank's quote and
// values are kept: one signature for fleetd to verify instead of one per bank. A TPM without a
// SHA-256 bank sends what it has, and fleetd's refusal says why.
func (t *TPM) AttestPlatform(ak *attest.AK, nonce, eventLog []byte) (*attest.PlatformParameters, error) {
	pp, err := t.tpm.AttestPlatform(ak, nonce, &attest.PlatformAttestConfig{EventLog: eventLog})
	if err != nil {
		return nil, fmt.Errorf("quote PCRs: %w", err)
	}
	var quotes []attest.Quote
	for _, q := range pp.Quotes {
		if att, err := tpm2.DecodeAttestationData(q.Quote); err == nil && att.AttestedQuoteInfo != nil &&
			att.AttestedQuoteInfo.PCRSelection.Hash == tpm2.AlgSHA256 {
			quotes = append(quotes, q)
		}
	}
	if len(quotes) == 0 {
		return pp, nil
	}
	pcrs := slices.DeleteFunc(slices.Clone(pp.PCRs), func(p attest.PCR) bool { return p.DigestAlg != crypto.SHA256 })
	pp.Quotes, pp.PCRs = quotes, pcrs
	return pp, nil
}

// pcrCount is the number of PCRs of a PC-client TPM's bank: a wipe receipt quotes them all, as
// the enrollment's quote did.
const pcrCount = 24

// QuoteReceipt quotes the SHA-256 PCRs 0 to 23 with ak over extraData, a wipe receipt's
// (attest.ReceiptExtraData): the same PCRs as the enrollment's quote, which fleetd compares.
func (t *TPM) QuoteReceipt(ak *attest.AK, extraData []byte) (*attest.Quote, error) {
	pcrs := make([]int, pcrCount)
	for i := range pcrs {
		pcrs[i] = i
	}
	q, err := ak.QuotePCRs(t.tpm, extraData, attest.HashSHA256, pcrs)
	if err != nil {
		return nil, fmt.Errorf("quote the SHA-256 PCRs for the receipt: %w", err)
	}
	return q, nil
}

// LDevIDKey is a new LDevID key: its certification by the AK, and its blobs as SPIRE's tpm_devid
// agent reads them (TPMT_PUBLIC and TPM2B_PRIVATE contents, both without size prefix).
type LDevIDKey struct {
	Certification attest.CertificationParameters
	Public        []byte
	Private       []byte
}

// NewLDevID creates an ECC P-256 ECDSA-SHA256 signing key (sign, fixedTPM, fixedParent,
// sensitiveDataOrigin, userWithAuth) under SPIRE's ECC SRK and has the AK certify it with nonce
// as qualifying data. The SRK is created as a transient primary for the call and flushed: it is
// derived from the owner seed and the template, so it is the same key SPIRE recreates, and
// nothing is left persisted in the TPM. The key itself is flushed too; only its blobs remain.
func (t *TPM) NewLDevID(ak *attest.AK, nonce []byte) (*LDevIDKey, error) {
	srk, _, err := tpm2.CreatePrimary(t.ch, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "", SRKTemplateHighECC())
	if err != nil {
		return nil, fmt.Errorf("create the LDevID parent (SPIRE's ECC SRK): %w", err)
	}
	defer flush(t.ch, srk)
	k, err := t.tpm.NewKey(ak, &attest.KeyConfig{
		Algorithm:      attest.ECDSA,
		Size:           256,
		QualifyingData: nonce,
		Parent:         &attest.ParentKeyConfig{Algorithm: attest.ECDSA, Handle: srk},
	})
	if err != nil {
		return nil, fmt.Errorf("create and certify the LDevID key: %w", err)
	}
	defer k.Close()
	pub, priv, err := k.Blobs()
	if err != nil {
		return nil, fmt.Errorf("read the LDevID key blobs: %w", err)
	}
	return &LDevIDKey{Certification: k.CertificationParameters(), Public: pub, Private: priv}, nil
}

// SRKTemplateHighECC is the ECC storage root key template SPIRE's tpm_devid agent creates the
// LDevID's parent from (TCG EK Credential Profile "H-2"): go-tpm-tools' SRKTemplateECC
// (AES-128-CFB, SHA-256, storage attributes with noDA) with the unique field empty. A key made
// under any other parent fails SPIRE's tpm2.Load with an integrity error.
func SRKTemplateHighECC() tpm2.Public {
	return tpm2.Public{
		Type:       tpm2.AlgECC,
		NameAlg:    tpm2.AlgSHA256,
		Attributes: tpm2.FlagStorageDefault | tpm2.FlagNoDA,
		ECCParameters: &tpm2.ECCParams{
			Symmetric: &tpm2.SymScheme{Alg: tpm2.AlgAES, KeyBits: 128, Mode: tpm2.AlgCFB},
			CurveID:   tpm2.CurveNISTP256,
			Point:     tpm2.ECPoint{XRaw: []byte{}, YRaw: []byte{}},
		},
	}
}

// flush unloads a transient object; a failure leaves it to the resource manager or the next reset.
func flush(rw io.ReadWriter, h tpmutil.Handle) { _ = tpm2.FlushContext(rw, h) }

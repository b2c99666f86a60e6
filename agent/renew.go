package agent

import (
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/pki"
)

// The node's side of a renewal (docs/enrollment.md, "Renewal"): every check proves the LDevID
// key with a TPM2_Certify by the LAK's AK over the check's nonce, and the certificates fleetd
// renews in its answer replace ldevid.pem and lak.pem. The TPM keys stay, and with them
// ldevid.pub, ldevid.priv and lak.blob. Nothing the answer carries is written before it is checked
// to certify the node's own key.

// ExitNotRenewed is `fleetd boot-check`'s exit code when the check was accepted as ok but fleetd
// did not renew a certificate that is due: the log line "certificates not renewed" says why
// (its code is one of docs/enrollment.md's renewal refusals).
const ExitNotRenewed = 7

// NotRenewedError is an accepted check whose due certificate fleetd did not renew.
type NotRenewedError struct {
	Device, Code, Message string
}

func (e *NotRenewedError) Error() string {
	return fmt.Sprintf("fleetd did not renew the certificates of %s (%s): %s", e.Device, e.Code, e.Message)
}

// ldevidFiles is the node's LDevID as the node directory holds it; pub and priv are nil when
// the directory has only ldevid.pem (the check then carries no proof, and fleetd says so).
type ldevidFiles struct {
	chain     [][]byte
	pub, priv []byte
}

// readLDevID reads ldevid.pem, ldevid.pub and ldevid.priv; nil when the node has no ldevid.pem.
func readLDevID(dir string) (*ldevidFiles, error) {
	pemBytes, err := os.ReadFile(filepath.Join(dir, FileLDevIDCert))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the LDevID certificate: %w", err)
	}
	certs, err := pki.ParseCertificatesPEM(pemBytes)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("read %s: no certificate (%v)", filepath.Join(dir, FileLDevIDCert), err)
	}
	ld := &ldevidFiles{}
	for _, c := range certs {
		ld.chain = append(ld.chain, c.Raw)
	}
	for name, dst := range map[string]*[]byte{FileLDevIDPub: &ld.pub, FileLDevIDPriv: &ld.priv} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read the LDevID key blob: %w", err)
		}
		*dst = b
	}
	if len(ld.pub) == 0 || len(ld.priv) == 0 {
		ld.pub, ld.priv = nil, nil
	}
	return ld, nil
}

// CertifyLDevID has the AK of lakBlob certify the LDevID key of pub and priv (TPMT_PUBLIC and
// TPM2B_PRIVATE contents, as ldevid.pub and ldevid.priv hold them) with nonce as qualifying
// data: the proof fleetd renews an LDevID on (attest.VerifyLDevIDKey checks it). The AK is
// loaded under go-attestation's SRK (0x81000001), the LDevID under SPIRE's ECC SRK, recreated
// and flushed as NewLDevID does; at most three objects are loaded at once (the reference
// simulator's limit), and all are flushed on return.
func (t *TPM) CertifyLDevID(lakBlob, pub, priv, nonce []byte) (*attest.CertificationParameters, error) {
	var ak struct {
		Public []byte
		Blob   []byte `json:"KeyBlob"`
	}
	if err := json.Unmarshal(lakBlob, &ak); err != nil {
		return nil, fmt.Errorf("read %s: %w", FileLAKBlob, err)
	}
	scheme, err := akScheme(ak.Public)
	if err != nil {
		return nil, err
	}
	akH, _, err := tpm2.Load(t.ch, srkHandle, "", ak.Public, ak.Blob)
	if err != nil {
		return nil, fmt.Errorf("load the AK of %s: %w", FileLAKBlob, err)
	}
	defer flush(t.ch, akH)
	srk, _, err := tpm2.CreatePrimary(t.ch, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "", SRKTemplateHighECC())
	if err != nil {
		return nil, fmt.Errorf("create the LDevID parent (SPIRE's ECC SRK): %w", err)
	}
	ldH, _, err := tpm2.Load(t.ch, srk, "", pub, priv)
	flush(t.ch, srk)
	if err != nil {
		return nil, fmt.Errorf("load the LDevID key from %s and %s: %w", FileLDevIDPub, FileLDevIDPriv, err)
	}
	defer flush(t.ch, ldH)
	area, _, _, err := tpm2.ReadPublic(t.ch, ldH)
	if err != nil {
		return nil, fmt.Errorf("read the LDevID public area: %w", err)
	}
	public, err := area.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode the LDevID public area: %w", err)
	}
	att, sig, err := tpm2.CertifyEx(t.ch, "", "", ldH, akH, nonce, scheme)
	if err != nil {
		return nil, fmt.Errorf("certify: %w", err)
	}
	return &attest.CertificationParameters{Public: public, CreateAttestation: att, CreateSignature: sig}, nil
}

// srkHandle is go-attestation's persisted RSA SRK, the AK's parent (its LoadAK uses it).
const srkHandle = tpmutil.Handle(0x81000001)

// akScheme is the signing scheme of the AK's public area (RSASSA or ECDSA, SHA-256: the AK
// templates go-attestation creates).
func akScheme(public []byte) (tpm2.SigScheme, error) {
	p, err := tpm2.DecodePublic(public)
	if err != nil {
		return tpm2.SigScheme{}, fmt.Errorf("decode the AK public area of %s: %w", FileLAKBlob, err)
	}
	switch p.Type {
	case tpm2.AlgRSA:
		return tpm2.SigScheme{Alg: tpm2.AlgRSASSA, Hash: tpm2.AlgSHA256}, nil
	case tpm2.AlgECC:
		return tpm2.SigScheme{Alg: tpm2.AlgECDSA, Hash: tpm2.AlgSHA256}, nil
	}
	return tpm2.SigScheme{}, fmt.Errorf("the AK of %s is of type 0x%x, not RSA or ECC", FileLAKBlob, uint16(p.Type))
}

// publicKey is the key of a TPMT_PUBLIC.
func publicKey(public []byte, file string) (crypto.PublicKey, error) {
	p, err := tpm2.DecodePublic(public)
	if err != nil {
		return nil, fmt.Errorf("decode the public area of %s: %w", file, err)
	}
	k, err := p.Key()
	if err != nil {
		return nil, fmt.Errorf("decode the public key of %s: %w", file, err)
	}
	return k, nil
}

// installRenewal writes the certificates fleetd renewed, each after checking that it certifies
// the node's own key (the LAK the AK of lak.blob, the LDevID the key of ldevid.pub): ldevid.pem
// first, then lak.pem, each replaced atomically (0644). A node cut between the two presents one
// new and one replaced certificate at its next check, which fleetd accepts and completes.
func installRenewal(install func(string, []api.NodeFile) error, dir string, r *api.Renewal, lakBlob []byte, ld *ldevidFiles) error {
	if r == nil || (len(r.LDevIDChain) == 0 && len(r.LAKChain) == 0) {
		return nil
	}
	var files []api.NodeFile
	if len(r.LDevIDChain) > 0 {
		if ld == nil || ld.pub == nil {
			return &FleetdError{Op: "renew the LDevID", Err: errors.New("fleetd renewed an LDevID this node did not prove")}
		}
		f, err := renewedCert(FileLDevIDCert, "LDevID", r.LDevIDChain, ld.pub, FileLDevIDPub)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	if len(r.LAKChain) > 0 {
		var ak struct{ Public []byte }
		if err := json.Unmarshal(lakBlob, &ak); err != nil {
			return fmt.Errorf("read %s: %w", FileLAKBlob, err)
		}
		f, err := renewedCert(FileLAKCert, "LAK", r.LAKChain, ak.Public, FileLAKBlob)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	if err := install(dir, files); err != nil {
		return fmt.Errorf("install the renewed certificates (the replaced ones stay accepted until the node presents the new ones): %w", err)
	}
	return nil
}

// reportRenewal logs what fleetd did about the node's certificates and returns a
// *NotRenewedError when a due one was not renewed.
func reportRenewal(log zerolog.Logger, res *api.BootCheckResponse) error {
	r := res.Renewal
	if r == nil {
		return nil
	}
	if len(r.LDevIDChain) > 0 || len(r.LAKChain) > 0 {
		ev := log.Info().Str("device", res.Device)
		if len(r.LDevIDChain) > 0 {
			ev = ev.Str("ldevid_serial", serialOf(r.LDevIDChain[0]))
		}
		if len(r.LAKChain) > 0 {
			ev = ev.Str("lak_serial", serialOf(r.LAKChain[0]))
		}
		ev.Msg("certificates renewed: restart the SPIRE agent to use a renewed LDevID")
	}
	if r.Refused == "" {
		return nil
	}
	log.Warn().Str("device", res.Device).Str("check", r.Refused).Str("reason", r.Message).Msg("certificates not renewed")
	return &NotRenewedError{Device: res.Device, Code: r.Refused, Message: r.Message}
}

// serialOf is a certificate's serial in lowercase hex, as NetBox holds it ("?" when it does not parse).
func serialOf(der []byte) string {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return "?"
	}
	return hex.EncodeToString(c.SerialNumber.Bytes())
}

// renewedCert is the node file name for a renewed chain: PEM, 0644, once its leaf certifies the
// node's own key (pub, read from the file keyFile).
func renewedCert(name, what string, chain [][]byte, pub []byte, keyFile string) (api.NodeFile, error) {
	key, err := publicKey(pub, keyFile)
	if err != nil {
		return api.NodeFile{}, err
	}
	pemBytes, err := chainPEM(chain, key)
	if err != nil {
		return api.NodeFile{}, &FleetdError{Op: "check the renewed " + what + " certificate", Err: err}
	}
	return api.NodeFile{Name: name, Data: pemBytes, Mode: 0o644}, nil
}

// Package api holds the JSON wire types of the node-facing routes: the enrollment exchange
// between `fleetd enroll` (the first action of a Workflow, in HookOS) and fleetd (docs/design.md §4, §6),
// and the boot check of `fleetd boot-check` on a running node (bootcheck.go, docs/design.md §5).
// The agent encodes them, the handlers decode them; byte fields travel as standard base64.
//
// The enrollment is two round trips:
//
//  1. POST /v1/attest/challenge (ChallengeRequest → ChallengeResponse). The agent names the
//     device it was told it is and the request its Workflow carries out (the Workflow's
//     hardwareMap, through the environment; a Workflow of an older request is refused), the TPM
//     version it found, the EK (public key, and its certificate from NV 0x01c00002 when there is
//     one) and the parameters of a fresh AK. fleetd approves the EK against NetBox's ek_sha256
//     (and the manufacturer CAs), checks the AK, and answers with a credential-activation
//     challenge for that AK and EK, a fresh nonce, and a sealed token carrying what the second
//     round trip needs.
//  2. POST /v1/attest/evidence (EvidenceRequest → EvidenceResponse). The agent sends the token
//     back with the activated secret, the quote of the SHA-256 PCR bank with the nonce, the PCR values
//     and the measured-boot event log, the certification of a new LDevID key (certified by the
//     AK with the nonce as qualifying data), its SMBIOS UUID and serial, the disks it sees, and
//     the AK's TPM-wrapped blob. fleetd verifies all of it and, for a provision only, issues the
//     LDevID and LAK certificates and puts the LAK files into the node's configuration; it
//     answers with the certificates (none for attest, wipe and retirement) and the by-id path of
//     the declared disk: the authorization to wipe it; for a wipe or a retirement, a receipt
//     grant (receipt.go).
//
// After a wipe's or a retirement's erase, `fleetd wipe-receipt` posts the receipt, the TPM's
// quote over what the wipe program reported, to POST /v1/wipe/receipt (receipt.go).
//
// Any refusal is a 4xx with an Error body whose code names the failed check; the agent exits
// with it and the Workflow fails before anything is wiped.
package api

import (
	"crypto"
	"fmt"

	"github.com/google/go-attestation/attest"
)

// The enrollment routes.
const (
	PathAttestChallenge = "/v1/attest/challenge"
	PathAttestEvidence  = "/v1/attest/evidence"
)

// Request body limits. An event log is tens of KiB (a few hundred at most); base64 adds a third.
const (
	MaxChallengeBody = 64 << 10
	MaxEvidenceBody  = 2 << 20
)

// ChallengeRequest is the first round trip's request.
type ChallengeRequest struct {
	Device     string    `json:"device"`       // the NetBox device name the Workflow gave the agent
	Request    string    `json:"request"`      // the request id the Workflow gave the agent (FLEETD_REQUEST)
	TPMVersion string    `json:"tpm_version"`  // "2.0"; "1.2" or "" (no TPM) are sent so fleetd can refuse and record why
	EK         *EK       `json:"ek,omitempty"` // absent unless TPMVersion is "2.0"
	AK         *AKParams `json:"ak,omitempty"` // absent unless TPMVersion is "2.0"
}

// EK is the TPM's RSA endorsement key.
type EK struct {
	Public      []byte `json:"public"`                // DER SubjectPublicKeyInfo
	Certificate []byte `json:"certificate,omitempty"` // DER, from NV 0x01c00002; absent when the TPM has none
}

// AKParams are go-attestation's AttestationParameters of a fresh AK.
type AKParams struct {
	Public            []byte `json:"public"`             // TPMT_PUBLIC
	CreateData        []byte `json:"create_data"`        // TPMS_CREATION_DATA
	CreateAttestation []byte `json:"create_attestation"` // TPMS_ATTEST of TPM2_CertifyCreation
	CreateSignature   []byte `json:"create_signature"`   // TPMT_SIGNATURE
}

// NewAKParams converts go-attestation's parameters for the wire.
func NewAKParams(p attest.AttestationParameters) *AKParams {
	return &AKParams{Public: p.Public, CreateData: p.CreateData, CreateAttestation: p.CreateAttestation, CreateSignature: p.CreateSignature}
}

// Attest converts the wire parameters for go-attestation.
func (p *AKParams) Attest() attest.AttestationParameters {
	return attest.AttestationParameters{Public: p.Public, CreateData: p.CreateData, CreateAttestation: p.CreateAttestation, CreateSignature: p.CreateSignature}
}

// ChallengeResponse is the first round trip's answer.
type ChallengeResponse struct {
	Token      string     `json:"token"`      // opaque; sent back unchanged in EvidenceRequest
	Credential Credential `json:"credential"` // for TPM2_ActivateCredential with the AK and the EK
	Nonce      []byte     `json:"nonce"`      // for the quotes and the LDevID certification
}

// Credential is go-attestation's EncryptedCredential (both fields keep their TPM2B size prefix).
type Credential struct {
	Credential []byte `json:"credential"`
	Secret     []byte `json:"secret"`
}

// NewCredential converts go-attestation's challenge for the wire.
func NewCredential(ec attest.EncryptedCredential) Credential {
	return Credential{Credential: ec.Credential, Secret: ec.Secret}
}

// Attest converts the wire challenge for go-attestation.
func (c Credential) Attest() attest.EncryptedCredential {
	return attest.EncryptedCredential{Credential: c.Credential, Secret: c.Secret}
}

// EvidenceRequest is the second round trip's request.
//
// Device and Token are its first members, in this order (json.Marshal keeps the declaration's):
// fleetd reads them and authenticates the token before it reads the rest of the body, and
// refuses a body that does not begin with them as malformed (docs/http.md).
type EvidenceRequest struct {
	Device   string        `json:"device"`
	Token    string        `json:"token"`
	Secret   []byte        `json:"secret"` // the secret TPM2_ActivateCredential recovered
	Platform Platform      `json:"platform"`
	LDevID   Certification `json:"ldevid"`
	SMBIOS   SMBIOS        `json:"smbios"`
	Disks    []Disk        `json:"disks"`
	// MAC is the MAC the agent netbooted from (the interface of HookOS's default route), lowercase
	// and colon-separated; empty when the agent could not tell. Claimed: kept in fleet_facts
	// (docs/design.md, "Attested facts"), never checked against NetBox at the enrollment.
	MAC string `json:"mac,omitempty"`
	// LAKBlob is the AK as go-attestation's AK.Marshal() returns it, what the agent writes to
	// lak.blob: the AK's public area and its private part wrapped by the TPM's storage key, so it
	// can be loaded (attest.TPM.LoadAK) only in the TPM that created it and is no secret
	// elsewhere. For a provision fleetd puts it, with the LAK certificate, into the node's
	// configuration, which delivers both to the installed node for its boot checks (docs/design.md §5);
	// fleetd does not interpret it. Untrusted: a blob that does not hold the certified AK makes
	// only that node's boot checks fail, on the node, before anything is sent.
	LAKBlob []byte `json:"lak_blob"`
	// LDevIDPrivate is the LDevID key's TPM2B_PRIVATE contents without size prefix, what the
	// agent writes to ldevid.priv (its public area is LDevID.Public, written to ldevid.pub): like
	// LAKBlob, wrapped by the TPM's storage key and loadable only in that TPM. For a provision
	// fleetd puts both, with the LDevID certificate, into the node's configuration, which delivers
	// them to the installed node for SPIRE's tpm_devid agent (docs/enrollment.md); fleetd does not
	// interpret it. Untrusted: a blob that does not load makes only that node's SPIRE attestation
	// fail.
	LDevIDPrivate []byte `json:"ldevid_private"`
}

// Platform is go-attestation's PlatformParameters: quotes of PCR banks by the AK (fleetd's agent
// sends the SHA-256 bank's; fleetd verifies every quote it is sent).
type Platform struct {
	AKPublic []byte  `json:"ak_public"` // TPMT_PUBLIC of the AK that quoted
	Quotes   []Quote `json:"quotes"`
	PCRs     []PCR   `json:"pcrs"`
	EventLog []byte  `json:"event_log"` // the TCG event log (binary_bios_measurements)
}

// Quote is one TPM2_Quote.
type Quote struct {
	Quote     []byte `json:"quote"`     // TPMS_ATTEST
	Signature []byte `json:"signature"` // TPMT_SIGNATURE
}

// PCR is one PCR value.
type PCR struct {
	Index  int    `json:"index"`
	Alg    string `json:"alg"` // "sha1", "sha256", "sha384" or "sha512"
	Digest []byte `json:"digest"`
}

var hashNames = map[crypto.Hash]string{crypto.SHA1: "sha1", crypto.SHA256: "sha256", crypto.SHA384: "sha384", crypto.SHA512: "sha512"}

// hashByName is hashNames the other way round, for the wire's names.
var hashByName = func() map[string]crypto.Hash {
	m := make(map[string]crypto.Hash, len(hashNames))
	for h, name := range hashNames {
		m[name] = h
	}
	return m
}()

// NewPlatform converts go-attestation's platform parameters for the wire.
func NewPlatform(p *attest.PlatformParameters) Platform {
	out := Platform{AKPublic: p.Public, EventLog: p.EventLog}
	for _, q := range p.Quotes {
		out.Quotes = append(out.Quotes, Quote{Quote: q.Quote, Signature: q.Signature})
	}
	for _, r := range p.PCRs {
		out.PCRs = append(out.PCRs, PCR{Index: r.Index, Alg: hashNames[r.DigestAlg], Digest: r.Digest})
	}
	return out
}

// Attest converts the wire platform parameters for go-attestation. An unknown PCR algorithm is
// the caller's mistake (a 400).
func (p Platform) Attest() (attest.PlatformParameters, error) {
	out := attest.PlatformParameters{Public: p.AKPublic, EventLog: p.EventLog,
		Quotes: make([]attest.Quote, 0, len(p.Quotes)), PCRs: make([]attest.PCR, 0, len(p.PCRs))}
	for _, q := range p.Quotes {
		out.Quotes = append(out.Quotes, attest.Quote{Quote: q.Quote, Signature: q.Signature})
	}
	for _, r := range p.PCRs {
		alg, ok := hashByName[r.Alg]
		if !ok {
			return attest.PlatformParameters{}, fmt.Errorf("PCR %d has algorithm %q; want sha1, sha256, sha384 or sha512", r.Index, r.Alg)
		}
		out.PCRs = append(out.PCRs, attest.PCR{Index: r.Index, DigestAlg: alg, Digest: r.Digest})
	}
	return out, nil
}

// Certification is go-attestation's CertificationParameters of the LDevID key.
type Certification struct {
	Public            []byte `json:"public"` // TPMT_PUBLIC (what the agent writes to ldevid.pub)
	CreateData        []byte `json:"create_data"`
	CreateAttestation []byte `json:"create_attestation"` // TPMS_ATTEST of TPM2_Certify by the AK
	CreateSignature   []byte `json:"create_signature"`
}

// NewCertification converts go-attestation's certification for the wire.
func NewCertification(c attest.CertificationParameters) Certification {
	return Certification{Public: c.Public, CreateData: c.CreateData, CreateAttestation: c.CreateAttestation, CreateSignature: c.CreateSignature}
}

// Attest converts the wire certification for go-attestation.
func (c Certification) Attest() attest.CertificationParameters {
	return attest.CertificationParameters{Public: c.Public, CreateData: c.CreateData, CreateAttestation: c.CreateAttestation, CreateSignature: c.CreateSignature}
}

// SMBIOS is what the firmware says the machine is (untrusted: the firmware is not attested to
// fleetd beyond the measured boot); fleetd records the UUID so configuration delivery can check it.
type SMBIOS struct {
	UUID   string `json:"uuid"`   // /sys/class/dmi/id/product_uuid
	Serial string `json:"serial"` // /sys/class/dmi/id/product_serial
}

// Disk is one whole disk the agent found.
type Disk struct {
	Serial string `json:"serial"`
	Path   string `json:"path"` // its /dev/disk/by-id path
}

// EvidenceResponse is the second round trip's answer: the enrollment succeeded. Only a provision
// issues certificates. For an attest both chains are empty: the node keeps the LDevID and LAK it
// was provisioned with (its boot checks read them from its own disk), and the attest only proves
// the machine again and clears its boot baseline. For a wipe or a retirement both chains are
// empty too: those requests end the device's identity. Without certificates only the disk
// authorization is given.
type EvidenceResponse struct {
	LDevIDChain [][]byte `json:"ldevid_chain"` // DER certificates, the LDevID leaf first, then its chain
	LAKChain    [][]byte `json:"lak_chain"`    // DER certificates, the LAK leaf first, then its chain
	Disk        string   `json:"disk"`         // the by-id path of the declared disk
	// FetchSecret is a provision's one-time secret for its configuration fetch, for a class kind
	// whose install carries it (cloud-init-nocloud, nixos-image, alpine-image); the agent writes
	// it to the Workflow's fetch-secret file, and the fetch presents it in HeaderFetchSecret.
	FetchSecret string `json:"fetch_secret,omitempty"`
	// Receipt is a wipe's or a retirement's receipt grant (receipt.go): the agent keeps it, with
	// the AK's blob, in the Workflow's directory for the receipt step after the erase.
	Receipt *ReceiptGrant `json:"receipt,omitempty"`
}

// HeaderFetchSecret is the request header a configuration fetch presents its fetch secret in.
const HeaderFetchSecret = "Fleetd-Fetch-Secret"

package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/api"
)

// IdentityMaterial is what a provision's configuration carries of the node's identity, kept on the
// device in NetBox (the fleet_identity JSON custom field, docs/design.md §2 and §9) so that any fleetd —
// the same one after a restart, or another instance — renders the same configuration when the
// node fetches it. It is written once, in the conditional write that records the attestation,
// and names the request it was issued for: a fetch serves it only while that request is the
// device's current one and is configuring (docs/design.md §9 says what "delivered once" rests on).
//
// Trust: nothing in it is a secret. The certificates are public; the LAK and LDevID key blobs
// are wrapped by the storage key of the machine's own TPM and load nowhere else; the SMBIOS UUID
// and any fetch secret are kept as SHA-256 hashes only, so reading NetBox does not give what a
// fetch presents. Everything in it was verified or issued by fleetd at the attestation; a value
// written by anyone else is undone (docs/design.md §9, "Fields fleetd owns").
//
// The JSON keys are the contract with other fleetd versions: add keys, never rename them. []byte
// fields are standard base64, certificate chains DER, leaf first.
type IdentityMaterial struct {
	Version int    `json:"version"` // IdentityVersion
	Request string `json:"request"` // the request id it was issued for
	// Name is the device's NetBox name at the attestation: the name its LDevID and LAK
	// certificates, its configuration and its node carry. NetBox's name is no field of fleetd's
	// (any device editor renames a device) and the seal does not cover it; this copy is sealed.
	// A device whose name is no longer this one is no node of either name (AttestedAs). Empty
	// in an identity recorded before fleetd kept it.
	Name string `json:"name,omitempty"`
	// Issued is when the attestation recorded it; Expires when its configuration stops being
	// served unfetched (Issued + config_delivery.pending_ttl): the request then fails.
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
	// UUIDSHA256 is the lowercase hex SHA-256 of the attested SMBIOS system UUID, normalised to
	// lowercase (UUIDHash). A fetch's claimed uuid must hash to it.
	UUIDSHA256 string `json:"uuid_sha256"`
	// SMBIOSSerial is the attested SMBIOS system serial, as the seed carries it; may be empty.
	SMBIOSSerial string `json:"smbios_serial,omitempty"`
	// FetchSecretSHA256 is the hex SHA-256 of a per-request fetch secret, when the enrollment
	// hands one to the node; empty when none is used.
	FetchSecretSHA256 string `json:"fetch_secret_sha256,omitempty"`
	// EKSHA256 is the lowercase hex SHA-256 of the EK the enrollment approved: a boot check
	// renews the certificates only while it is among the device's ek_sha256 (renew.go).
	EKSHA256 string `json:"ek_sha256,omitempty"`

	LAK    LAKMaterial    `json:"lak"`
	LDevID LDevIDMaterial `json:"ldevid"`

	// BootstrapTokenKey is the id of the seal key the request's kubelet bootstrap token is
	// derived under (bootstraptoken.go), for a Talos class: the token itself is kept nowhere.
	BootstrapTokenKey string `json:"bootstrap_token_key,omitempty"`
	// KubeletClient is the kubelet client CSR fleetd approved for the request with its
	// bootstrap token (membership.go): joining ends active only with one recorded.
	KubeletClient *ApprovedCSR `json:"kubelet_client,omitempty"`
	// Delivered is when a joining class's node fetched its configuration: its join deadline
	// runs from there (membership.go).
	Delivered time.Time `json:"delivered,omitzero"`
}

// ApprovedCSR is a CertificateSigningRequest fleetd approved: its name, its uid and when.
type ApprovedCSR struct {
	Name     string    `json:"name"`
	UID      string    `json:"uid"`
	Approved time.Time `json:"approved"`
}

// IdentityVersion is the version of IdentityMaterial's JSON this fleetd writes and reads.
const IdentityVersion = 1

// LAKMaterial is the node's attestation key: its certificate chain (DER, leaf first) and the AK
// as the agent's TPM wrapped it (go-attestation's AK.Marshal, the node's lak.blob).
type LAKMaterial struct {
	Chain [][]byte `json:"chain"`
	Blob  []byte   `json:"blob"`
}

// LDevIDMaterial is the node's device identity key: its certificate chain (DER, leaf first) and,
// when the enrollment sends them, the key's TPMT_PUBLIC and TPM2B_PRIVATE contents without size
// prefix, as SPIRE's tpm_devid agent reads ldevid.pub and ldevid.priv (docs/design.md §7).
type LDevIDMaterial struct {
	Chain   [][]byte `json:"chain"`
	Public  []byte   `json:"public,omitempty"`
	Private []byte   `json:"private,omitempty"`
}

// Empty reports whether no identity is recorded (the field is unset or cleared).
func (m IdentityMaterial) Empty() bool { return m.Request == "" }

// AttestedAs is the name device d's identity was attested under when d no longer has it, and
// whether it was renamed: NetBox names are compared without case, as Kubernetes node names are
// lowercase. A device renamed since its attestation carries another name than its certificates
// and its node do, and its sealed standing is not that of a node of its new name (a machine
// whose own device was renamed away, holding a kubelet certificate of the name, would borrow
// it): its node is refused under either name until the device is provisioned again
// (docs/design.md §9, "Sealed fields"). An identity recorded without a name is never renamed.
func AttestedAs(d Device) (attested string, renamed bool) {
	n := d.Owned.Identity.Name
	if n == "" || d.Owned.Identity.Empty() || strings.EqualFold(n, d.Name) {
		return "", false
	}
	return n, true
}

// UUIDHash is how an SMBIOS UUID is kept and compared: the hex SHA-256 of its trimmed, lowercase
// text (SMBIOS tools print UUIDs in either case).
func UUIDHash(uuid string) string {
	sum := sha256.Sum256([]byte(normUUID(uuid)))
	return hex.EncodeToString(sum[:])
}

// MatchesUUID reports whether claimed is the attested SMBIOS UUID.
func (m IdentityMaterial) MatchesUUID(claimed string) bool {
	return normUUID(claimed) != "" && UUIDHash(claimed) == m.UUIDSHA256
}

// Check refuses material this fleetd cannot render from: a newer version, or parts missing.
func (m IdentityMaterial) Check() error {
	var problems []error
	switch {
	case m.Version != IdentityVersion:
		problems = append(problems, fmt.Errorf("version %d, this fleetd reads version %d", m.Version, IdentityVersion))
	case m.Request == "":
		problems = append(problems, errors.New("no request"))
	}
	if len(m.UUIDSHA256) != 64 {
		problems = append(problems, errors.New("no SMBIOS UUID hash"))
	}
	if len(m.LAK.Chain) == 0 || len(m.LAK.Blob) == 0 {
		problems = append(problems, errors.New("no LAK certificate or blob"))
	}
	if m.Expires.IsZero() {
		problems = append(problems, errors.New("no expiry"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("fleet_identity: %w", errors.Join(problems...))
	}
	return nil
}

// NodeFiles are the files the configuration delivers into NodeDir: lak.pem (the LAK chain as
// PEM) and lak.blob (LAKFiles), and the LDevID's ldevid.pem (its chain as PEM), ldevid.pub and
// ldevid.priv (LDevIDFiles), when the material holds both LDevID blobs (an older fleetd did not
// record the private one).
func (m IdentityMaterial) NodeFiles() []api.NodeFile {
	files := []api.NodeFile{
		{Name: NodeFileLAKCert, Mode: 0o644, Data: chainPEM(m.LAK.Chain)},
		{Name: NodeFileLAKBlob, Mode: 0o600, Data: m.LAK.Blob},
	}
	if len(m.LDevID.Chain) > 0 && len(m.LDevID.Public) > 0 && len(m.LDevID.Private) > 0 {
		files = append(files, LDevIDFiles(chainPEM(m.LDevID.Chain), m.LDevID.Public, m.LDevID.Private)...)
	}
	return files
}

func chainPEM(chain [][]byte) []byte {
	var out []byte
	for _, der := range chain {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out
}

// normUUID is the form UUIDs are compared in: SMBIOS tools print them in upper or lower case.
func normUUID(s string) string {
	return strings.ToLower(strings.TrimSpace(s))
}

package api

// The node files: what an installed node keeps in NodeDir, as `fleetd enroll` names them in the
// Workflow's directory, as every class kind's one-time configuration delivers them, and as
// `fleetd boot-check` and SPIRE's tpm_devid agent read them (docs/design.md, the node files;
// docs/enrollment.md). fleetd's domain (fleet) and the agent both name them from here.

// NodeDir is where an installed node keeps its node files. It is under /var because Talos writes
// machine files nowhere else.
const NodeDir = "/var/lib/fleetd-node"

// The node files' names.
const (
	NodeFileLDevIDCert = "ldevid.pem"  // the LDevID leaf then its chain, PEM
	NodeFileLDevIDPub  = "ldevid.pub"  // TPMT_PUBLIC, no size prefix
	NodeFileLDevIDPriv = "ldevid.priv" // TPM2B_PRIVATE contents, no size prefix
	NodeFileLAKCert    = "lak.pem"     // the LAK leaf then its chain, PEM
	NodeFileLAKBlob    = "lak.blob"    // go-attestation's AK.Marshal(): reloaded with attest.TPM.LoadAK
)

// TextFormSuffix names a node file's text form: name + TextFormSuffix holds the file's bytes in
// standard base64 on one line, with the file's mode. A Talos config delivers the files of
// TextForms so, and `fleetd boot-check` installs each from it when the file is missing.
const TextFormSuffix = ".b64"

// TextForms are the node files a Talos config delivers in their text form, in the order they are
// installed from it (the key blobs before the certificate of the key): the LDevID files, two of
// which are binary, and both certificates, which a renewal replaces. Talos writes a machine file
// again at every boot, so a certificate delivered as itself would put the enrollment's back over a
// renewed one at the next reboot. Only lak.blob, the AK itself, never changes and is delivered as
// it is.
func TextForms() []string {
	return []string{NodeFileLDevIDPub, NodeFileLDevIDPriv, NodeFileLDevIDCert, NodeFileLAKCert}
}

// IsTextForm reports whether a Talos config delivers node file name in its text form (TextForms).
func IsTextForm(name string) bool {
	switch name {
	case NodeFileLDevIDPub, NodeFileLDevIDPriv, NodeFileLDevIDCert, NodeFileLAKCert:
		return true
	}
	return false
}

package fleet

import (
	"github.com/folly-infra/fleetd/api"

	"github.com/folly-infra/fleetd/pki"
)

// Node files are what a node's one-time configuration delivers besides the OS's own settings:
// the LAK certificate and the AK blob that `fleetd boot-check` reads (docs/design.md §5), and the
// LDevID certificate and key blobs that SPIRE's tpm_devid agent reads (devid_cert_path,
// devid_pub_path, devid_priv_path; docs/enrollment.md). The enrollment agent writes them into
// HookOS's shared directory (the Template's FLEETD_WORKFLOW_DIR), which lives in RAM and is gone
// after the reboot, and Talos has no writable
// root file system that an action in HookOS could copy them into (its STATE and EPHEMERAL
// partitions are created at its first boot). So every class kind carries them in its
// configuration, and the node's OS writes them into NodeDir on its first boot: nixos-image and
// alpine-image nodes from the seed's files, cloud-init from the NoCloud seed's vendor-data, Talos
// from machine.files (package render: talos.go, seed.go, nocloud.go). Talos writes a machine
// file as a UTF-8 string, and rewrites it from the config at every boot: the LDevID files go there
// in their text form (TextForm), and `fleetd boot-check` installs each file from it when the file
// is missing, so a renewed certificate is not put back to the delivered one at the next boot.
//
// Trust: the certificates are fleetd's own; the blobs are what the attested agent sent, opaque to
// fleetd. None is a secret: the certificates are public and the blobs are wrapped by the TPM's
// storage key, usable only in that TPM.

// NodeDir is where an installed node keeps its node files: the default of `fleetd boot-check
// --dir` (agent.DefaultNodeDir). It is under /var because Talos writes machine files nowhere else.
const NodeDir = api.NodeDir

// The names of the node files in NodeDir: api's, which the agent names them by too.
const (
	NodeFileLAKCert    = api.NodeFileLAKCert
	NodeFileLAKBlob    = api.NodeFileLAKBlob
	NodeFileLDevIDCert = api.NodeFileLDevIDCert
	NodeFileLDevIDPub  = api.NodeFileLDevIDPub
	NodeFileLDevIDPriv = api.NodeFileLDevIDPriv
)

// TextFormSuffix names a node file's text form (api.TextFormSuffix), which `fleetd boot-check`
// installs the file from when it is missing (agent.InstallDelivered).
const TextFormSuffix = api.TextFormSuffix

// TalosTextForm reports whether a Talos config delivers the node file in its text form
// (api.TextForms says which and why).
func TalosTextForm(name string) bool { return api.IsTextForm(name) }

// LAKFiles are the files a node's boot checks need: lak.pem, the LAK leaf then its chain
// (public, 0644), and lak.blob, the AK as the agent's TPM wrapped it (0600: useless outside that
// TPM, but nothing else on the node needs to read it). They are the bytes the agent wrote into
// the shared directory under the same names.
func LAKFiles(lak *pki.Certificate, blob []byte) []api.NodeFile {
	return []api.NodeFile{
		{Name: NodeFileLAKCert, Mode: 0o644, Data: lak.PEM()},
		{Name: NodeFileLAKBlob, Mode: 0o600, Data: blob},
	}
}

// LDevIDFiles are the files SPIRE's tpm_devid agent reads (docs/enrollment.md): ldevid.pem, the
// LDevID leaf then its chain (public, 0644), and the key's blobs ldevid.pub (TPMT_PUBLIC) and
// ldevid.priv (TPM2B_PRIVATE contents), both without size prefix and 0600 (wrapped by the TPM's
// storage key; nothing but root's SPIRE agent needs them). They are the bytes the enrollment agent
// wrote into the shared directory under the same names.
func LDevIDFiles(chainPEM, public, private []byte) []api.NodeFile {
	return []api.NodeFile{
		{Name: NodeFileLDevIDCert, Mode: 0o644, Data: chainPEM},
		{Name: NodeFileLDevIDPub, Mode: 0o600, Data: public},
		{Name: NodeFileLDevIDPriv, Mode: 0o600, Data: private},
	}
}

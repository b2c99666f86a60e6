package api

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"regexp"
)

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

// NodeFile is one file of NodeDir: a plain file name, its permission bits and its bytes, owned by
// root. fleetd's configurations deliver these and the agent installs them (api.NodeFile and
// api.NodeFile are this type).
type NodeFile struct {
	Name string      // a plain file name in NodeDir (CheckNodeFiles)
	Mode fs.FileMode // its permission bits
	Data []byte
}

// Path is the file's absolute path on the node.
func (f NodeFile) Path() string { return NodeDir + "/" + f.Name }

// TextForm is f in its text form (TextFormSuffix), with f's mode.
func (f NodeFile) TextForm() NodeFile {
	return NodeFile{Name: f.Name + TextFormSuffix, Mode: f.Mode, Data: []byte(base64.StdEncoding.EncodeToString(f.Data) + "\n")}
}

var nodeFileName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// CheckNodeFiles is what both ends check of a set of node files before anything is rendered or
// written: plain lowercase names (no path, no leading dot, which the agent's temporary files use),
// each once, permission bits only, no empty file. It returns one error per problem, none when the set
// is good.
func CheckNodeFiles(files []NodeFile) []error {
	seen := map[string]bool{}
	var problems []error
	for _, f := range files {
		switch {
		case !nodeFileName.MatchString(f.Name):
			problems = append(problems, fmt.Errorf("%q is not a plain file name (lowercase letters, digits, '.', '_', '-'; no leading '.')", f.Name))
		case seen[f.Name]:
			problems = append(problems, fmt.Errorf("%s is given twice", f.Name))
		case f.Mode&^fs.ModePerm != 0:
			problems = append(problems, fmt.Errorf("%s has mode %v: only permission bits can be delivered and installed", f.Name, f.Mode))
		case len(f.Data) == 0:
			problems = append(problems, fmt.Errorf("%s is empty", f.Name))
		}
		seen[f.Name] = true
	}
	return problems
}

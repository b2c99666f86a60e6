package fleet

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"

	"github.com/folly-infra/fleetd/pki"
)

// Node files are what a node's one-time configuration delivers besides the OS's own settings:
// the LAK certificate and the AK blob that `fleetd boot-check` reads (docs/design.md §5). The enrollment
// agent writes them into HookOS's /workflow, which lives in RAM and is gone after the reboot,
// and Talos has no writable root file system that an action in HookOS could copy them into
// (its STATE and EPHEMERAL partitions are created at its first boot). So every class kind carries
// them in its configuration, and the node's OS writes them into NodeDir on its first boot: Talos
// from machine.files, nixos-image and alpine-image nodes from the seed's files, cloud-init from
// the NoCloud seed's vendor-data (render_talos.go, render_seed.go, render_nocloud.go).
//
// Trust: the LAK certificate is fleetd's own; the blob is what the attested agent sent, opaque to
// fleetd. Neither is a secret: the certificate is public and the blob is wrapped by the TPM's
// storage key, usable only in that TPM.

// NodeDir is where an installed node keeps its node files: the default of `fleetd boot-check
// --dir` (agent.DefaultNodeDir). It is under /var because Talos writes machine files nowhere else.
const NodeDir = "/var/lib/fleetd-node"

// The names of the LAK files in NodeDir, as the agent names them (agent.FileLAKCert,
// agent.FileLAKBlob).
const (
	NodeFileLAKCert = "lak.pem"
	NodeFileLAKBlob = "lak.blob"
)

// NodeFile is one file a node's configuration delivers into NodeDir, owned by root.
type NodeFile struct {
	Name string      // a plain file name in NodeDir
	Mode fs.FileMode // its permission bits
	Data []byte
}

// Path is the file's absolute path on the node.
func (f NodeFile) Path() string { return NodeDir + "/" + f.Name }

// LAKFiles are the files a node's boot checks need: lak.pem, the LAK leaf then its chain
// (public, 0644), and lak.blob, the AK as the agent's TPM wrapped it (0600: useless outside that
// TPM, but nothing else on the node needs to read it). They are the bytes the agent wrote into
// /workflow under the same names.
func LAKFiles(lak *pki.Certificate, blob []byte) []NodeFile {
	return []NodeFile{
		{Name: NodeFileLAKCert, Mode: 0o644, Data: lak.PEM()},
		{Name: NodeFileLAKBlob, Mode: 0o600, Data: blob},
	}
}

var nodeFileName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// checkNodeFiles checks what the caller of Render built: plain, distinct names, permission bits
// only, no empty file. A problem here is fleetd's own.
func checkNodeFiles(files []NodeFile) error {
	seen := map[string]bool{}
	var problems []error
	for _, f := range files {
		switch {
		case !nodeFileName.MatchString(f.Name):
			problems = append(problems, fmt.Errorf("node file name %q is not a plain lowercase file name", f.Name))
		case seen[f.Name]:
			problems = append(problems, fmt.Errorf("node file %s is given twice", f.Name))
		case f.Mode&^fs.ModePerm != 0:
			problems = append(problems, fmt.Errorf("node file %s has mode %v: only permission bits are delivered", f.Name, f.Mode))
		case len(f.Data) == 0:
			problems = append(problems, fmt.Errorf("node file %s is empty", f.Name))
		}
		seen[f.Name] = true
	}
	if len(problems) > 0 {
		return fmt.Errorf("check the node files: %w", errors.Join(problems...))
	}
	return nil
}

package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/folly-infra/fleetd/api"
)

// The files `fleetd enroll` writes into the Workflow's shared directory (docs/design.md §4). The later
// actions, SPIRE's tpm_devid agent (devid_cert_path, devid_pub_path, devid_priv_path) and
// `fleetd boot-check` rely on these names.
// The LDevID and LAK files are the node files (api.NodeFile…), under the same names.
const (
	FileLDevIDCert = api.NodeFileLDevIDCert
	FileLDevIDPub  = api.NodeFileLDevIDPub
	FileLDevIDPriv = api.NodeFileLDevIDPriv
	FileLAKCert    = api.NodeFileLAKCert
	FileLAKBlob    = api.NodeFileLAKBlob
	FileDisk       = "disk" // the declared disk's /dev/disk/by-id path, one line
	// FileFetchSecret is a provision's one-time fetch secret, one line, for a class kind whose
	// install carries it to the configuration fetch (the Fleetd-Fetch-Secret header).
	FileFetchSecret = "fetch-secret"
)

// writeFile replaces dir/name atomically: a temporary file in dir, written, synced and renamed,
// so a reader sees the old content or the new, never a part. mode is set before any byte is
// written.
func writeFile(dir, name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

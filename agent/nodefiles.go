package agent

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/folly-infra/fleetd/api"
)

// InstallNodeFiles installs files into dir, the node directory, creating it (0755) when missing.
// Each file replaces its name atomically (a temporary file in dir, written with its mode set
// first, synced, renamed over the name, then the directory synced), so SPIRE's agent or a boot
// check reading it sees the old bytes or the new, never a part, and a blob is never readable
// beyond its mode. The set is checked as a whole before anything is written: a plain name (no
// path, no leading dot, which the temporary files use), permission bits only, some bytes, each
// name once; a bad set writes nothing. The files are installed in the order given, so a caller
// that needs one to follow another (a certificate after the key blob it certifies) lists them so;
// a failure part way leaves the files before it installed and the rest as they were.
//
// It is what `fleetd boot-check` installs node files with: a Talos node's LDevID from the text
// form its machine config delivers, and renewed certificates (docs/boot-checks.md).
func InstallNodeFiles(dir string, files []api.NodeFile) error {
	if err := checkNodeFiles(files); err != nil {
		return fmt.Errorf("install node files in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install node files: %w", err)
	}
	for _, f := range files {
		if err := writeFile(dir, f.Name, f.Data, f.Mode); err != nil {
			return fmt.Errorf("install node files in %s: %w", dir, err)
		}
	}
	return nil
}

func checkNodeFiles(files []api.NodeFile) error {
	return errors.Join(api.CheckNodeFiles(files)...)
}

// TextFormSuffix names a node file's text form (api.TextFormSuffix).
const TextFormSuffix = api.TextFormSuffix

// InstallDelivered installs, from its text form in dir, each of those files that dir does not hold
// (InstallNodeFiles: atomically, with the text form's mode), and returns the names it installed.
// A file dir already holds is left as it is: it was installed at an earlier boot, or renewed since,
// and Talos writes the text forms from its config again at every boot. A text form that is not
// base64 installs nothing and is an error naming it; so is one that cannot be read.
func InstallDelivered(dir string) ([]string, error) {
	var files []api.NodeFile
	for _, name := range api.TextForms() {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("install %s from its text form: %w", name, err)
		}
		text := filepath.Join(dir, name+TextFormSuffix)
		st, err := os.Stat(text)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("install %s from its text form: %w", name, err)
		}
		raw, err := os.ReadFile(text)
		if err != nil {
			return nil, fmt.Errorf("install %s from its text form: %w", name, err)
		}
		data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("install %s: its text form %s is not base64 (%v): the node's configuration is damaged; provision it again", name, text, err)
		}
		files = append(files, api.NodeFile{Name: name, Mode: st.Mode().Perm(), Data: data})
	}
	if len(files) == 0 {
		return nil, nil
	}
	if err := InstallNodeFiles(dir, files); err != nil {
		return nil, err
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	return names, nil
}

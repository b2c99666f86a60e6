package render

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"gopkg.in/yaml.v3"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// DeliveredFiles reads the node files back out of a rendered configuration of the given kind, as
// the node's OS finds them: Talos's machine.files, the seed's files, the write_files of the
// NoCloud seed's vendor-data. Only files in NodeDir are returned. It is what the development
// stack's simulated node does on its first boot, and how tests check that a configuration
// carries exactly the files the boot check needs; a real node's OS does it itself.
func DeliveredFiles(kind fleet.Kind, body []byte) ([]api.NodeFile, error) {
	var (
		files []api.NodeFile
		err   error
	)
	switch kind {
	case fleet.KindTalos:
		files, err = talosFiles(body)
	case fleet.KindNixOS, fleet.KindAlpine:
		files, err = seedFiles(body)
	case fleet.KindCloudInit:
		files, err = nocloudFiles(body)
	default:
		err = fmt.Errorf("kind %q has no configuration format", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("read the node files of a %s configuration: %w", kind, err)
	}
	return files, nil
}

func talosFiles(body []byte) ([]api.NodeFile, error) {
	p, err := configloader.NewFromBytes(body)
	if err != nil {
		return nil, fmt.Errorf("load the Talos config: %w", err)
	}
	if p.Machine() == nil {
		return nil, errors.New("the Talos config has no machine section")
	}
	mf, err := p.Machine().Files()
	if err != nil {
		return nil, fmt.Errorf("read machine.files: %w", err)
	}
	var out []api.NodeFile
	for _, f := range mf {
		if name, ok := inNodeDir(f.Path()); ok {
			out = append(out, api.NodeFile{Name: name, Mode: f.Permissions().Perm(), Data: []byte(f.Content())})
		}
	}
	return out, nil
}

func seedFiles(body []byte) ([]api.NodeFile, error) {
	var s Seed
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("decode the seed: %w", err)
	}
	var out []api.NodeFile
	for _, f := range s.Files {
		name, ok := inNodeDir(f.Path)
		if !ok {
			continue
		}
		mode, err := parseMode(f.Mode)
		if err != nil {
			return nil, fmt.Errorf("seed file %s: %w", f.Path, err)
		}
		out = append(out, api.NodeFile{Name: name, Mode: mode, Data: f.ContentBase64})
	}
	return out, nil
}

// nocloudWriteFiles is the part of a cloud-config that write_files reads.
type nocloudWriteFiles struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Permissions string `yaml:"permissions"`
		Encoding    string `yaml:"encoding"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
}

func nocloudFiles(body []byte) ([]api.NodeFile, error) {
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil // no vendor-data: no node files
		}
		if err != nil {
			return nil, fmt.Errorf("read the NoCloud tar: %w", err)
		}
		if h.Name != "vendor-data" {
			continue
		}
		raw, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read vendor-data: %w", err)
		}
		return vendorDataFiles(raw)
	}
}

func vendorDataFiles(raw []byte) ([]api.NodeFile, error) {
	if !bytes.HasPrefix(raw, []byte("#cloud-config\n")) {
		return nil, errors.New("vendor-data is not a #cloud-config")
	}
	var cc nocloudWriteFiles
	if err := yaml.Unmarshal(raw, &cc); err != nil {
		return nil, fmt.Errorf("decode vendor-data: %w", err)
	}
	var out []api.NodeFile
	for _, f := range cc.WriteFiles {
		name, ok := inNodeDir(f.Path)
		if !ok {
			continue
		}
		mode, err := parseMode(f.Permissions)
		if err != nil {
			return nil, fmt.Errorf("vendor-data file %s: %w", f.Path, err)
		}
		data := []byte(f.Content)
		if f.Encoding == "b64" || f.Encoding == "base64" {
			if data, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				return nil, fmt.Errorf("vendor-data file %s: decode base64: %w", f.Path, err)
			}
		} else if f.Encoding != "" && f.Encoding != "text/plain" {
			return nil, fmt.Errorf("vendor-data file %s has encoding %q", f.Path, f.Encoding)
		}
		out = append(out, api.NodeFile{Name: name, Mode: mode, Data: data})
	}
	return out, nil
}

// inNodeDir returns the file name of a path directly in NodeDir.
func inNodeDir(path string) (string, bool) {
	name, ok := strings.CutPrefix(path, fleet.NodeDir+"/")
	return name, ok && name != "" && !strings.Contains(name, "/")
}

// parseMode reads octal permission bits ("0600").
func parseMode(s string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m&^uint64(fs.ModePerm) != 0 {
		return 0, fmt.Errorf("mode %q is not octal permission bits", s)
	}
	return fs.FileMode(m), nil
}

package fleet

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The NoCloud seed of a cloud-init-nocloud class (SPEC §1 step 6): a tar with meta-data,
// network-config and user-data that the install Workflow extracts into
// /var/lib/cloud/seed/nocloud/ on the installed root filesystem (reference §4).

// nocloudInterface is the name network-config gives the primary interface (set-name).
const nocloudInterface = "nic0"

// renderNoCloud renders the seed tar. Entries are in a fixed order with fixed ownership, modes
// and the clock's time, so the same inputs and randomness give the same bytes.
func (r *Renderer) renderNoCloud(d Device, c Class) (NodeConfig, error) {
	if c.CloudInit == nil || strings.TrimSpace(c.CloudInit.UserData) == "" {
		return NodeConfig{}, fmt.Errorf("%w: class %s has no cloud_init.user_data", ErrConfigRejected, c.Name)
	}
	iid, err := r.instanceID(d)
	if err != nil {
		return NodeConfig{}, err
	}
	files := []struct {
		name string
		body string
	}{
		{"meta-data", nocloudMetaData(iid, d.Name)},
		{"network-config", r.nocloudNetworkConfig(d)},
		{"user-data", c.CloudInit.UserData},
	}
	mtime := r.cfg.Clock.Now().UTC().Truncate(1e9)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)),
			ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return NodeConfig{}, fmt.Errorf("write %s header: %w", f.name, err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return NodeConfig{}, fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return NodeConfig{}, fmt.Errorf("close NoCloud tar: %w", err)
	}
	return NodeConfig{
		ContentType: ContentTypeTar,
		Body:        buf.Bytes(),
		Summary: fmt.Sprintf("NoCloud seed for %s (instance-id %s, %s on %s)",
			d.Name, iid, d.Address, d.PrimaryMAC()),
	}, nil
}

// instanceID draws a fresh instance-id: cloud-init runs its first-boot modules once per id, so a
// reprovisioned machine must get a new one.
func (r *Renderer) instanceID(d Device) (string, error) {
	b := make([]byte, 8)
	if _, err := io.ReadFull(r.cfg.Random, b); err != nil {
		return "", fmt.Errorf("draw NoCloud instance-id: %w", err)
	}
	return "iid-" + d.Name + "-" + hex.EncodeToString(b), nil
}

// nocloudMetaData is the meta-data YAML. Every scalar is a double-quoted JSON string, which
// YAML reads back verbatim.
func nocloudMetaData(iid, hostname string) string {
	return "instance-id: " + yq(iid) + "\nlocal-hostname: " + yq(hostname) + "\n"
}

// nocloudNetworkConfig is network config v2 (reference §4): the interface with the primary MAC
// gets the static address, the default route and the nameservers. The MAC is quoted: YAML 1.1
// readers (PyYAML) would read an all-digit MAC such as 00:11:22:33:44:55 as a base-60 number.
func (r *Renderer) nocloudNetworkConfig(d Device) string {
	var b strings.Builder
	b.WriteString("version: 2\nethernets:\n")
	fmt.Fprintf(&b, "  %s:\n", nocloudInterface)
	fmt.Fprintf(&b, "    match:\n      macaddress: %s\n", yq(string(d.PrimaryMAC())))
	fmt.Fprintf(&b, "    set-name: %s\n", yq(nocloudInterface))
	b.WriteString("    dhcp4: false\n")
	fmt.Fprintf(&b, "    addresses:\n      - %s\n", yq(d.Address.String()))
	fmt.Fprintf(&b, "    routes:\n      - to: %s\n        via: %s\n", yq("0.0.0.0/0"), yq(r.cfg.Gateway.String()))
	b.WriteString("    nameservers:\n      addresses:\n")
	for _, a := range r.cfg.DNS {
		fmt.Fprintf(&b, "        - %s\n", yq(a.String()))
	}
	return b.String()
}

// yq quotes s as a YAML double-quoted scalar (a JSON string is one).
func yq(s string) string {
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}

package render

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// The NoCloud seed of a cloud-init-nocloud class (docs/design.md §1 step 6): a tar with meta-data,
// network-config, user-data and, when there are node files, vendor-data, that the install
// Workflow extracts into /var/lib/cloud/seed/nocloud/ on the installed root filesystem
// (reference §4; NoCloud reads vendor-data from the seed directory as an optional file).

// nocloudInterface is the name network-config gives the primary interface (set-name).
const nocloudInterface = "nic0"

// renderNoCloud renders the seed tar. Entries are in a fixed order with fixed ownership, modes
// and the clock's time, so the same inputs and randomness give the same bytes. The class's
// user-data is passed verbatim; the node files travel in vendor-data, which cloud-init runs with
// it on the first boot.
func (r *Renderer) renderNoCloud(d fleet.Device, c fleet.Class, nodeFiles []api.NodeFile) (fleet.NodeConfig, error) {
	if c.CloudInit == nil || strings.TrimSpace(c.CloudInit.UserData) == "" {
		return fleet.NodeConfig{}, fmt.Errorf("%w: class %s has no cloud_init.user_data", fleet.ErrConfigRejected, c.Name)
	}
	iid, err := r.instanceID(d)
	if err != nil {
		return fleet.NodeConfig{}, err
	}
	files := []struct {
		name string
		body string
	}{
		{"meta-data", nocloudMetaData(iid, d.Name)},
		{"network-config", r.nocloudNetworkConfig(d)},
		{"user-data", c.CloudInit.UserData},
	}
	if len(nodeFiles) > 0 {
		if err := checkUserDataKeepsVendorData(c); err != nil {
			return fleet.NodeConfig{}, err
		}
		files = append(files, struct{ name, body string }{"vendor-data", nocloudVendorData(nodeFiles)})
	}
	mtime := r.cfg.Clock.Now().UTC().Truncate(1e9)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)),
			ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fleet.NodeConfig{}, fmt.Errorf("write %s header: %w", f.name, err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return fleet.NodeConfig{}, fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("close NoCloud tar: %w", err)
	}
	return fleet.NodeConfig{
		ContentType: fleet.ContentTypeTar,
		Body:        buf.Bytes(),
		Summary: fmt.Sprintf("NoCloud seed for %s (instance-id %s, %s on %s)",
			d.Name, iid, d.Address, d.PrimaryMAC()),
	}, nil
}

// instanceID draws a fresh instance-id: cloud-init runs its first-boot modules once per id, so a
// reprovisioned machine must get a new one.
func (r *Renderer) instanceID(d fleet.Device) (string, error) {
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
func (r *Renderer) nocloudNetworkConfig(d fleet.Device) string {
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

// nocloudVendorData is a #cloud-config whose write_files writes the node files, base64-encoded
// (cloud-init's `encoding: b64`), owned by root, with their modes. write_files runs in
// cloud-init's init stage and creates NodeDir (0755).
func nocloudVendorData(files []api.NodeFile) string {
	var b strings.Builder
	b.WriteString("#cloud-config\n# fleetd: the files `fleetd boot-check` reads (docs/boot-checks.md)\nwrite_files:\n")
	for _, f := range files {
		fmt.Fprintf(&b, "  - path: %s\n", yq(f.Path()))
		fmt.Fprintf(&b, "    owner: %s\n", yq("root:root"))
		fmt.Fprintf(&b, "    permissions: %s\n", yq(fmt.Sprintf("%04o", f.Mode.Perm())))
		fmt.Fprintf(&b, "    encoding: %s\n", yq("b64"))
		fmt.Fprintf(&b, "    content: %s\n", yq(base64.StdEncoding.EncodeToString(f.Data)))
	}
	return b.String()
}

// checkUserDataKeepsVendorData refuses a class whose #cloud-config user-data would make
// cloud-init drop the vendor-data's files. cloud-init merges the user's cloud-config over the
// vendor's key by key, and a top-level key both set keeps the user's value whole
// (cloudinit/helpers.py ConfigMerger: lists are not appended), so a user-data with its own
// write_files silently loses the LAK files; `vendor_data: {enabled: false}` turns vendor-data
// off. User-data in another format (a script, MIME multipart, jinja) is not looked into.
func checkUserDataKeepsVendorData(c fleet.Class) error {
	ud := c.CloudInit.UserData
	if first, _, _ := strings.Cut(ud, "\n"); strings.TrimSpace(first) != "#cloud-config" {
		return nil
	}
	var top map[string]any
	if err := yaml.Unmarshal([]byte(ud), &top); err != nil {
		return nil // cloud-init's own problem with the class, not one of the node files
	}
	if _, ok := top["write_files"]; ok {
		return fmt.Errorf("%w: class %s's user-data sets write_files, so cloud-init would ignore the vendor-data's write_files, which carry the node's LAK files into %s: write those files another way (runcmd or bootcmd)",
			fleet.ErrConfigRejected, c.Name, fleet.NodeDir)
	}
	if vd, ok := top["vendor_data"].(map[string]any); ok && strings.EqualFold(fmt.Sprint(vd["enabled"]), "false") {
		return fmt.Errorf("%w: class %s's user-data turns vendor-data off (vendor_data.enabled false), which carries the node's LAK files into %s",
			fleet.ErrConfigRejected, c.Name, fleet.NodeDir)
	}
	return nil
}

// yq quotes s as a YAML double-quoted scalar (a JSON string is one).
func yq(s string) string {
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}

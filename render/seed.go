package render

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/folly-infra/fleetd/fleet"
)

// SeedVersion is the version of the seed document's schema (docs/seed-schema.md). A change that
// an existing first-boot reader cannot ignore increments it: version 2 added files, which a
// version 1 reader would skip, leaving the node without the LAK files its boot checks need.
const SeedVersion = 2

// Seed is the first-boot document of nixos-image and alpine-image nodes (docs/design.md §1 step 6),
// documented field by field in docs/seed-schema.md.
type Seed struct {
	Version   int               `json:"version"`
	Hostname  string            `json:"hostname"`
	Class     string            `json:"class"`
	Kind      fleet.Kind        `json:"kind"`
	Profile   string            `json:"profile"`
	Address   string            `json:"address"` // CIDR, e.g. "10.0.0.6/24"
	Gateway   string            `json:"gateway"`
	DNS       []string          `json:"dns"`
	NTP       []string          `json:"ntp"`
	Endpoints map[string]string `json:"endpoints"`
	Device    SeedDevice        `json:"device"`
	Files     []SeedFile        `json:"files"` // the node files (nodefiles.go), written before anything else
}

// SeedFile is one file the first-boot reader writes, owned by root, creating its directory
// (0755) when missing.
type SeedFile struct {
	Path          string `json:"path"`           // absolute, under /var/lib/fleetd-node
	Mode          string `json:"mode"`           // octal permission bits, e.g. "0600"
	ContentBase64 []byte `json:"content_base64"` // the bytes, standard base64 in the JSON
}

// SeedDevice identifies the machine the seed was rendered for, so the node can check it booted on
// the machine that was attested.
type SeedDevice struct {
	Name       string `json:"name"`
	NetBoxID   int64  `json:"netbox_id"`
	MAC        string `json:"mac"`
	UUID       string `json:"uuid"`   // attested SMBIOS system UUID
	Serial     string `json:"serial"` // attested SMBIOS system serial, may be empty
	DiskSerial string `json:"disk_serial"`
}

// renderSeed renders the seed JSON: the profile the node switches into, its static address and
// the fleet's endpoints.
func (r *Renderer) renderSeed(d fleet.Device, c fleet.Class, id fleet.NodeIdentity) (fleet.NodeConfig, error) {
	if c.Profile == "" {
		return fleet.NodeConfig{}, fmt.Errorf("%w: class %s names no profile for the node to switch into", fleet.ErrConfigRejected, c.Name)
	}
	if id.UUID == "" {
		return fleet.NodeConfig{}, fmt.Errorf("%w: no attested SMBIOS UUID to bind the seed to", fleet.ErrConfigRejected)
	}
	s := Seed{
		Version:   SeedVersion,
		Hostname:  d.Name,
		Class:     c.Name,
		Kind:      c.Kind,
		Profile:   c.Profile,
		Address:   d.Address.String(),
		Gateway:   r.cfg.Gateway.String(),
		DNS:       addrStrings(r.cfg.DNS),
		NTP:       append([]string{}, r.cfg.NTP...),
		Endpoints: map[string]string{},
		Device: SeedDevice{Name: d.Name, NetBoxID: d.ID, MAC: string(d.PrimaryMAC()),
			UUID: id.UUID, Serial: id.Serial, DiskSerial: d.Declared.DiskSerial},
		Files: []SeedFile{},
	}
	for _, f := range id.Files {
		s.Files = append(s.Files, SeedFile{Path: f.Path(), Mode: fmt.Sprintf("%04o", f.Mode.Perm()), ContentBase64: f.Data})
	}
	for k, v := range r.cfg.Endpoints {
		s.Endpoints[k] = v
	}
	body, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("encode seed: %w", err)
	}
	return fleet.NodeConfig{
		ContentType: fleet.ContentTypeSeed,
		Body:        append(body, '\n'),
		Summary: fmt.Sprintf("%s seed for %s (profile %s, %s, endpoints %s)",
			c.Kind, d.Name, c.Profile, d.Address, endpointNames(r.cfg.Endpoints)),
	}, nil
}

func endpointNames(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

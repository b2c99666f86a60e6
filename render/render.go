// Package render is the fleet's Renderer (fleet.Renderer, the domain's port): it renders the
// configuration a node fetches once from the device's declaration, its class and what
// attestation verified — a Talos machine config validated as Talos would (talos.go), the seed
// document of nixos-image and alpine-image nodes (seed.go), the NoCloud tar of cloud-init nodes
// (nocloud.go) — and reads the node files back out of one (delivered.go). Talos machinery and
// YAML are linked here and not in the domain.
package render

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// Rendering turns a device's declaration and its class into the configuration the installed OS
// fetches once (docs/design.md §1 step 4 renders it, step 6 delivers it). Rendering is pure: everything it
// needs from files (the Talos secrets bundle) is read by the caller and passed in Config.
//
// Trust: the Device and Class are the owner's word (NetBox, classes.json); NodeIdentity holds
// values the agent reported and attestation verified. Nothing the node sends at fetch time reaches
// the renderer.

// Config is what the renderer needs besides the device and the class. main builds it
// from fleetd.yaml (the secrets bundle is read from the file the config names).
type Config struct {
	// TalosSecrets is a Talos secrets bundle (the YAML `talosctl gen secrets` writes). Required
	// when any class is of kind talos; it holds the cluster's CAs and tokens.
	TalosSecrets []byte
	// TalosVersion is the Talos version the nodes run ("v1.11"), which picks the config
	// contract. Empty means the contract of the machinery fleetd is built with.
	TalosVersion      string
	ClusterName       string
	ClusterEndpoint   string // https://host:6443
	KubernetesVersion string // "1.34.1"; empty means the machinery's default
	// AuthzWebhook, when set, is fleetd's authorization webhook, which the control plane
	// configs of joining classes make their API server ask first (talos_authz.go). Nil: they
	// are rendered without it.
	AuthzWebhook *AuthzWebhook

	// Endpoints are the fleet's named endpoints handed to seeds (e.g. "fleetd" → its URL,
	// "spire" → the SPIRE server address). Names are lowercase words.
	Endpoints map[string]string
	DNS       []netip.Addr // nameservers every node uses; at least one
	NTP       []string     // time servers (host names or addresses); empty leaves the OS default
	Gateway   netip.Addr   // the default gateway; must be inside each device's prefix

	Clock  fleet.Clock  // stamps the NoCloud tar
	Random fleet.Random // draws NoCloud instance ids
}

// The renderer is the domain's port.
var _ fleet.Renderer = (*Renderer)(nil)

// Renderer renders node configurations. It is safe for concurrent use.
type Renderer struct {
	cfg   Config
	talos *talosGenerator // nil when no secrets bundle was given
}

// New checks the configuration as a whole (every problem listed) and prepares the Talos
// generator from the secrets bundle.
func New(cfg Config) (*Renderer, error) {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if cfg.Clock == nil {
		bad("no clock")
	}
	if cfg.Random == nil {
		bad("no randomness")
	}
	if len(cfg.DNS) == 0 {
		bad("no DNS servers: list at least one nameserver for the nodes")
	}
	for _, a := range cfg.DNS {
		if !a.IsValid() {
			bad("a DNS server address is empty")
		}
	}
	if !cfg.Gateway.IsValid() || !cfg.Gateway.Is4() {
		bad("gateway %q is not an IPv4 address: set the nodes' default gateway", cfg.Gateway)
	}
	for name, u := range cfg.Endpoints {
		if !fleet.IsDNSLabel(name) {
			bad("endpoint name %q must be a lowercase word (letters, digits, '-')", name)
		}
		if strings.TrimSpace(u) == "" {
			bad("endpoint %q is empty", name)
		}
	}
	if cfg.AuthzWebhook != nil {
		problems = append(problems, checkAuthzWebhook(cfg.AuthzWebhook)...)
	}
	r := &Renderer{cfg: cfg}
	if len(cfg.TalosSecrets) > 0 {
		g, errs := newTalosGenerator(cfg)
		problems = append(problems, errs...)
		r.talos = g
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("new renderer: %w", errors.Join(problems...))
	}
	return r, nil
}

// Render renders the configuration of device d, of class c, for the machine attestation
// identified as id. A configuration the OS would reject is never returned: the error then wraps
// ErrConfigRejected and says why.
func (r *Renderer) Render(d fleet.Device, c fleet.Class, id fleet.NodeIdentity) (fleet.NodeConfig, error) {
	return r.render(d, c, id, true)
}

// Check makes every check Render makes of the configuration of device d, of class c, for the
// machine attestation identified as id, and returns it without its Body: what an attestation
// needs, which delivers nothing. A Talos config is then not encoded once its class's first config
// was (talos_template.go).
func (r *Renderer) Check(d fleet.Device, c fleet.Class, id fleet.NodeIdentity) (fleet.NodeConfig, error) {
	nc, err := r.render(d, c, id, false)
	nc.Body = nil
	return nc, err
}

func (r *Renderer) render(d fleet.Device, c fleet.Class, id fleet.NodeIdentity, body bool) (fleet.NodeConfig, error) {
	if err := r.checkDevice(d); err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	if err := checkNodeFiles(id.Files); err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	var (
		nc  fleet.NodeConfig
		err error
	)
	switch c.Kind {
	case fleet.KindTalos:
		nc, err = r.renderTalos(d, c, id, body)
	case fleet.KindNixOS, fleet.KindAlpine:
		nc, err = r.renderSeed(d, c, id)
	case fleet.KindCloudInit:
		nc, err = r.renderNoCloud(d, c, id.Files)
	default:
		err = fmt.Errorf("%w: class %s has kind %q, which fleetd cannot render", fleet.ErrConfigRejected, c.Name, c.Kind)
	}
	if err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	nc.Kind = c.Kind
	return nc, nil
}

// checkDevice refuses a device whose declaration cannot carry a static network configuration.
// The declaration checks of docs/design.md §1 step 2 already ran; these guard the renderer on its own.
func (r *Renderer) checkDevice(d fleet.Device) error {
	switch {
	case !fleet.IsDNSLabel(d.Name):
		return fmt.Errorf("%w: device name %q is not a valid hostname", fleet.ErrConfigRejected, d.Name)
	case d.PrimaryMAC() == "":
		return fmt.Errorf("%w: the device has no MAC to match its interface", fleet.ErrConfigRejected)
	case !d.Address.IsValid() || !d.Address.Addr().Is4():
		return fmt.Errorf("%w: the device has no primary IPv4 address", fleet.ErrConfigRejected)
	case d.Address.Bits() >= 31:
		return fmt.Errorf("%w: the device's address %s has no room for a gateway: give it its network's prefix length", fleet.ErrConfigRejected, d.Address)
	case !d.Address.Masked().Contains(r.cfg.Gateway):
		return fmt.Errorf("%w: gateway %s is not inside the device's network %s: fix the address's prefix length in NetBox or the gateway in fleetd.yaml",
			fleet.ErrConfigRejected, r.cfg.Gateway, d.Address.Masked())
	case d.IP() == r.cfg.Gateway:
		return fmt.Errorf("%w: the device's address %s is the gateway's", fleet.ErrConfigRejected, d.IP())
	}
	return nil
}

// checkNodeFiles checks what the caller of Render built (the domain, from the attested agent's
// blobs and the issued certificates) by the rules the agent also applies (api.CheckNodeFiles).
// A problem here is fleetd's own.
func checkNodeFiles(files []api.NodeFile) error {
	if problems := api.CheckNodeFiles(files); len(problems) > 0 {
		return fmt.Errorf("check the node files: %w", errors.Join(problems...))
	}
	return nil
}

package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Rendering turns a device's declaration and its class into the configuration the installed OS
// fetches once (docs/design.md §1 step 4 renders it, step 6 delivers it). Rendering is pure: everything it
// needs from files (the Talos secrets bundle) is read by the caller and passed in RenderConfig.
//
// Trust: the Device and Class are the owner's word (NetBox, classes.json); NodeIdentity holds
// values the agent reported and attestation verified. Nothing the node sends at fetch time reaches
// the renderer.

// ErrConfigRejected is wrapped by Render when the device's declaration or its class would
// produce a configuration the OS rejects (Talos validation in metal mode, a class patch that does
// not apply, an address the seed cannot carry). The text after it is safe to journal. Any other
// error from Render is fleetd's own failure.
var ErrConfigRejected = errors.New("configuration would be rejected")

// NodeIdentity is what attestation verified about the machine the configuration is for, and the
// files of the identity fleetd gave it.
type NodeIdentity struct {
	UUID   string // SMBIOS system UUID reported by the agent, bound to the attested TPM
	Serial string // SMBIOS system serial reported by the agent, may be empty
	// Files are delivered into NodeDir on the node by every kind of configuration (nodefiles.go):
	// for a provision, the LAK files its boot checks read (LAKFiles).
	Files []NodeFile
}

// NodeConfig is one rendered configuration, ready to be served once.
type NodeConfig struct {
	Kind        Kind
	ContentType string
	Body        []byte
	Summary     string   // one line for the journal, e.g. "Talos worker config for node-a (...)"
	Warnings    []string // what the OS's validator warned about, if anything
}

// Content types of the rendered configurations.
const (
	ContentTypeTalos = "application/yaml"
	ContentTypeSeed  = "application/json"
	ContentTypeTar   = "application/x-tar"
)

// RenderConfig is what the renderer needs besides the device and the class. main builds it
// from fleetd.yaml (the secrets bundle is read from the file the config names).
type RenderConfig struct {
	// TalosSecrets is a Talos secrets bundle (the YAML `talosctl gen secrets` writes). Required
	// when any class is of kind talos; it holds the cluster's CAs and tokens.
	TalosSecrets []byte
	// TalosVersion is the Talos version the nodes run ("v1.11"), which picks the config
	// contract. Empty means the contract of the machinery fleetd is built with.
	TalosVersion      string
	ClusterName       string
	ClusterEndpoint   string // https://host:6443
	KubernetesVersion string // "1.34.1"; empty means the machinery's default

	// Endpoints are the fleet's named endpoints handed to seeds (e.g. "fleetd" → its URL,
	// "spire" → the SPIRE server address). Names are lowercase words.
	Endpoints map[string]string
	DNS       []netip.Addr // nameservers every node uses; at least one
	NTP       []string     // time servers (host names or addresses); empty leaves the OS default
	Gateway   netip.Addr   // the default gateway; must be inside each device's prefix

	Clock  Clock  // stamps the NoCloud tar
	Random Random // draws NoCloud instance ids
}

// Renderer renders node configurations. It is safe for concurrent use.
type Renderer struct {
	cfg   RenderConfig
	talos *talosGenerator // nil when no secrets bundle was given
}

// NewRenderer checks the configuration as a whole (every problem listed) and prepares the Talos
// generator from the secrets bundle.
func NewRenderer(cfg RenderConfig) (*Renderer, error) {
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
		if !dnsLabel.MatchString(name) {
			bad("endpoint name %q must be a lowercase word (letters, digits, '-')", name)
		}
		if strings.TrimSpace(u) == "" {
			bad("endpoint %q is empty", name)
		}
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
func (r *Renderer) Render(d Device, c Class, id NodeIdentity) (NodeConfig, error) {
	if err := r.checkDevice(d); err != nil {
		return NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	if err := checkNodeFiles(id.Files); err != nil {
		return NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	var (
		nc  NodeConfig
		err error
	)
	switch c.Kind {
	case KindTalos:
		nc, err = r.renderTalos(d, c, id.Files)
	case KindNixOS, KindAlpine:
		nc, err = r.renderSeed(d, c, id)
	case KindCloudInit:
		nc, err = r.renderNoCloud(d, c, id.Files)
	default:
		err = fmt.Errorf("%w: class %s has kind %q, which fleetd cannot render", ErrConfigRejected, c.Name, c.Kind)
	}
	if err != nil {
		return NodeConfig{}, fmt.Errorf("render %s config for %s: %w", c.Kind, d.Name, err)
	}
	nc.Kind = c.Kind
	return nc, nil
}

// checkDevice refuses a device whose declaration cannot carry a static network configuration.
// The declaration checks of docs/design.md §1 step 2 already ran; these guard the renderer on its own.
func (r *Renderer) checkDevice(d Device) error {
	switch {
	case !dnsLabel.MatchString(d.Name):
		return fmt.Errorf("%w: device name %q is not a valid hostname", ErrConfigRejected, d.Name)
	case d.PrimaryMAC() == "":
		return fmt.Errorf("%w: the device has no MAC to match its interface", ErrConfigRejected)
	case !d.Address.IsValid() || !d.Address.Addr().Is4():
		return fmt.Errorf("%w: the device has no primary IPv4 address", ErrConfigRejected)
	case d.Address.Bits() >= 31:
		return fmt.Errorf("%w: the device's address %s has no room for a gateway: give it its network's prefix length", ErrConfigRejected, d.Address)
	case !d.Address.Masked().Contains(r.cfg.Gateway):
		return fmt.Errorf("%w: gateway %s is not inside the device's network %s: fix the address's prefix length in NetBox or the gateway in fleetd.yaml",
			ErrConfigRejected, r.cfg.Gateway, d.Address.Masked())
	case d.IP() == r.cfg.Gateway:
		return fmt.Errorf("%w: the device's address %s is the gateway's", ErrConfigRejected, d.IP())
	}
	return nil
}

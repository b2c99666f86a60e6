package render

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"gopkg.in/yaml.v3"

	"github.com/folly-infra/fleetd/fleet"
)

// metalMode is the runtime mode machined validates a downloaded config in on bare metal
// (talos internal/app/machined/pkg/runtime/mode.go ModeMetal, which machinery does not export).
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }

// talosGenerator holds the generation input built once from the secrets bundle. Input.Config
// only reads it, so one generator serves concurrent renders.
type talosGenerator struct {
	input     *generate.Input
	authz     *AuthzWebhook // nil: no authorization webhook in the control plane configs
	templates templates     // each class's part of its nodes' configs (talos_template.go)
}

// newTalosGenerator decodes the secrets bundle the way secrets.LoadBundle does (from bytes
// instead of a path), validates it, and prepares the generation input.
func newTalosGenerator(cfg Config) (*talosGenerator, []error) {
	var errs []error
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal(cfg.TalosSecrets, bundle); err != nil {
		return nil, append(errs, fmt.Errorf("decode Talos secrets bundle: %w", err))
	}
	if err := bundle.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("check Talos secrets bundle: %w (generate one with `talosctl gen secrets`)", err))
	}
	var contract *config.VersionContract // nil is the machinery's current contract
	if cfg.TalosVersion != "" {
		c, err := config.ParseContractFromVersion(cfg.TalosVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("parse Talos version %q: %w (use a version such as v1.11)", cfg.TalosVersion, err))
		}
		contract = c
	}
	if cfg.ClusterName == "" {
		errs = append(errs, errors.New("no cluster name for the Talos configs"))
	}
	if !strings.HasPrefix(cfg.ClusterEndpoint, "https://") {
		errs = append(errs, fmt.Errorf("cluster endpoint %q must be an https URL such as https://cp.example:6443", cfg.ClusterEndpoint))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	kube := cfg.KubernetesVersion
	if kube == "" {
		kube = constants.DefaultKubernetesVersion
	}
	in, err := generate.NewInput(cfg.ClusterName, cfg.ClusterEndpoint, strings.TrimPrefix(kube, "v"),
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		return nil, []error{fmt.Errorf("prepare Talos config generation: %w", err)}
	}
	return &talosGenerator{input: in, authz: cfg.AuthzWebhook}, nil
}

// renderTalos takes the class's template (the machine config of its machine type with the
// class's patches applied in order, built once per class: talos_template.go), applies the node's
// own patch (with the node files as machine.files), and validates the result the way machined
// does after downloading it (Validate in metal mode) and its machine.files the way machined writes
// them at boot. The first config of each template is also loaded back from its bytes
// (configloader), as machined loads it; later ones differ only by the node patch's typed fields.
//
// Without wantBody (Check), a config whose template has been loaded back once is validated
// without being encoded.
func (r *Renderer) renderTalos(d fleet.Device, c fleet.Class, id fleet.NodeIdentity, wantBody bool) (fleet.NodeConfig, error) {
	if r.talos == nil {
		return fleet.NodeConfig{}, errors.New("no Talos secrets bundle is configured: name one in fleetd.yaml")
	}
	if c.Talos == nil {
		return fleet.NodeConfig{}, fmt.Errorf("%w: class %s has no talos block", fleet.ErrConfigRejected, c.Name)
	}
	if err := checkDiskSerial(d.Declared.DiskSerial); err != nil {
		return fleet.NodeConfig{}, err
	}
	var mt machine.Type
	switch c.Talos.MachineType {
	case "controlplane":
		mt = machine.TypeControlPlane
	case "worker":
		mt = machine.TypeWorker
	default:
		return fleet.NodeConfig{}, fmt.Errorf("%w: class %s has machine type %q", fleet.ErrConfigRejected, c.Name, c.Talos.MachineType)
	}
	tpl, err := r.talos.template(c, mt)
	if err != nil {
		return fleet.NodeConfig{}, err
	}
	node, err := r.talosNodePatch(d, id)
	if err != nil {
		return fleet.NodeConfig{}, err
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(tpl.cfg), []configpatcher.Patch{node})
	if err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("%w: apply the node patch to class %s: %s", fleet.ErrConfigRejected, c.Name, oneLine(err.Error()))
	}
	cfg, err := out.Config()
	if err != nil {
		return fleet.NodeConfig{}, fmt.Errorf("%w: load the patched config: %s", fleet.ErrConfigRejected, oneLine(err.Error()))
	}
	var body []byte
	if wantBody || !tpl.loaded.Load() {
		if body, err = cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled)); err != nil {
			return fleet.NodeConfig{}, fmt.Errorf("encode Talos config: %w", err)
		}
	}
	warnings, err := tpl.validate(cfg, body)
	if err != nil {
		return fleet.NodeConfig{}, err
	}
	return fleet.NodeConfig{
		ContentType: fleet.ContentTypeTalos,
		Body:        body,
		Warnings:    warnings,
		Summary: fmt.Sprintf("Talos %s config for %s (install disk serial %s, %s)",
			c.Talos.MachineType, d.Name, d.Declared.DiskSerial, d.Address),
	}, nil
}

// ValidateTalosConfig checks served bytes as machined checks a downloaded config: it loads them
// with configloader and validates them in metal mode. The error wraps ErrConfigRejected and
// carries Talos's own message. It also checks machine.files as machined's writeUserFiles task
// does at every boot, which Validate does not: a file created outside /var, or an unknown op,
// stops that boot (and Talos reboots into the same config).
func ValidateTalosConfig(body []byte) (warnings []string, err error) {
	p, err := configloader.NewFromBytes(body)
	if err != nil {
		return nil, fmt.Errorf("%w: Talos cannot load it: %s", fleet.ErrConfigRejected, oneLine(err.Error()))
	}
	return validateTalos(p)
}

// validateTalos is what ValidateTalosConfig checks once the bytes are loaded: Validate in metal
// mode and machine.files as machined writes them.
func validateTalos(p config.Provider) (warnings []string, err error) {
	warnings, err = p.Validate(metalMode{})
	if err != nil {
		return warnings, fmt.Errorf("%w: Talos validation in metal mode failed: %s", fleet.ErrConfigRejected, oneLine(err.Error()))
	}
	if p.Machine() == nil {
		return warnings, nil
	}
	files, err := p.Machine().Files()
	if err != nil {
		return warnings, fmt.Errorf("%w: Talos cannot read machine.files: %s", fleet.ErrConfigRejected, oneLine(err.Error()))
	}
	for i, f := range files {
		if err := checkTalosFile(f.Path(), f.Op()); err != nil {
			return warnings, fmt.Errorf("%w: machine.files[%d]: %w", fleet.ErrConfigRejected, i, err)
		}
	}
	return warnings, nil
}

// checkTalosFile is the check machined's writeUserFiles makes of a machine file before writing
// it: the op is create, overwrite or append, and create is allowed only under /var (the root file
// system is read-only), except in the two places machined handles itself (static pod manifests
// and the CRI customization part).
func checkTalosFile(path, op string) error {
	switch op {
	case "create", "overwrite", "append":
	default:
		return fmt.Errorf("%s has op %q; Talos knows create, overwrite and append", path, op)
	}
	special := filepath.Dir(path) == constants.ManifestsDirectory || path == filepath.Join("/etc", constants.CRICustomizationConfigPart)
	first, _, _ := strings.Cut(strings.TrimLeft(path, "/"), "/")
	if op == "create" && first != "var" && !special {
		return fmt.Errorf("create %s: Talos creates machine files only under /var, and stops the boot otherwise", path)
	}
	return nil
}

// talosNodePatch is the node's own patch (see talosNodeFields), built as the typed v1alpha1
// document Talos's loader would make of it, so no YAML is parsed per node
// (TestNodePatchAsTalosLoadsIt holds it to what configpatcher.LoadPatch makes of the same patch).
func (r *Renderer) talosNodePatch(d fleet.Device, id fleet.NodeIdentity) (configpatcher.Patch, error) {
	node, err := r.talosNodeFields(d, id)
	if err != nil {
		return nil, err
	}
	return configpatcher.NewStrategicMergePatch(container.NewV1Alpha1(node)), nil
}

// talosNodeFields is what only this node has: its hostname, the install disk selected by the
// declared serial, a static address on the interface with the device's primary MAC, its node
// files, and its own kubelet bootstrap token in cluster.token, which replaces the secrets
// bundle's shared one (docs/design.md §1, "Joining the cluster"): no rendered configuration
// carries the bundle's. Talos writes each machine file at every boot (op create replaces it) with its content
// as a string, so a file must be UTF-8 text to survive the YAML (the agent's AK blob is JSON); the
// LDevID files go in their text form (TalosTextForm), which `fleetd boot-check` installs from.
func (r *Renderer) talosNodeFields(d fleet.Device, id fleet.NodeIdentity) (*v1alpha1.Config, error) {
	if !bootstrapTokenRE.MatchString(id.BootstrapToken.String()) {
		return nil, fmt.Errorf("the Talos config of %s has no bootstrap token of its own (got %d characters): fleetd renders none with the secrets bundle's shared one", d.Name, len(id.BootstrapToken.String()))
	}
	files := id.Files
	dhcp := false
	m := &v1alpha1.MachineConfig{
		MachineInstall: &v1alpha1.InstallConfig{InstallDiskSelector: &v1alpha1.InstallDiskSelector{Serial: d.Declared.DiskSerial}},
		MachineNetwork: &v1alpha1.NetworkConfig{
			NetworkHostname: d.Name,
			NameServers:     addrStrings(r.cfg.DNS),
			NetworkInterfaces: v1alpha1.NetworkDeviceList{{
				DeviceSelector:  &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: string(d.PrimaryMAC())},
				DeviceDHCP:      &dhcp,
				DeviceAddresses: []string{d.Address.String()},
				DeviceRoutes:    []*v1alpha1.Route{{RouteNetwork: "0.0.0.0/0", RouteGateway: r.cfg.Gateway.String()}},
			}},
		},
	}
	if len(r.cfg.NTP) > 0 {
		m.MachineTime = &v1alpha1.TimeConfig{TimeServers: r.cfg.NTP}
	}
	for _, f := range files {
		if fleet.TalosTextForm(f.Name) {
			f = f.TextForm()
		}
		if !utf8.Valid(f.Data) {
			return nil, fmt.Errorf("%w: node file %s is not UTF-8 text, which a Talos machine file must be", fleet.ErrConfigRejected, f.Name)
		}
		m.MachineFiles = append(m.MachineFiles, &v1alpha1.MachineFile{FilePath: f.Path(), FilePermissions: v1alpha1.FileMode(f.Mode.Perm()), FileOp: "create", FileContent: string(f.Data)})
	}
	return &v1alpha1.Config{MachineConfig: m, ClusterConfig: &v1alpha1.ClusterConfig{BootstrapToken: id.BootstrapToken.String()}}, nil
}

// bootstrapTokenRE is a bootstrap token's form (k8s.io/cluster-bootstrap/token/api
// BootstrapTokenPattern).
var bootstrapTokenRE = regexp.MustCompile(`\A[a-z0-9]{6}\.[a-z0-9]{16}\z`)

// checkDiskSerial refuses a serial Talos would read as a pattern: diskSelector fields are glob
// matched, so "*" would select any disk.
func checkDiskSerial(serial string) error {
	switch {
	case strings.TrimSpace(serial) == "":
		return fmt.Errorf("%w: disk_serial is empty: declare the serial of the install disk", fleet.ErrConfigRejected)
	case strings.ContainsAny(serial, `*?[]\`):
		return fmt.Errorf("%w: disk_serial %q contains a glob character, so Talos could select another disk", fleet.ErrConfigRejected, serial)
	}
	return nil
}

// multiHeader is how go-multierror starts its message ("2 errors occurred:"); nested multierrors
// put it in the middle of a line.
var multiHeader = regexp.MustCompile(`\d+ errors? occurred:`)

// oneLine folds a multi-line error (Talos returns multierrors with bullet lists) into one line
// for the journal: "first problem; second problem".
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(multiHeader.ReplaceAllString(s, ""), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
		switch {
		case l == "":
		case len(parts) > 0 && strings.HasSuffix(parts[len(parts)-1], ":"):
			parts[len(parts)-1] += " " + l
		default:
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

func addrStrings[T interface{ String() string }](as []T) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// GenerateTalosSecrets makes a fresh Talos secrets bundle (what `talosctl gen secrets` writes),
// for the development stack and tests. Production reads the bundle the operator generated.
func GenerateTalosSecrets(clock fleet.Clock) ([]byte, error) {
	b, err := secrets.NewBundle(clock, config.TalosVersionCurrent)
	if err != nil {
		return nil, fmt.Errorf("generate Talos secrets bundle: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("encode Talos secrets bundle: %w", err)
	}
	return buf.Bytes(), nil
}

package render

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/folly-infra/fleetd/fleet"
)

// What every node of a class shares is built once (an enrollment spent a third of its
// time generating the machine config, loading the class's patches, and loading its own encoded
// config back): the generated config of the class's machine type with the class's patches
// applied, and the proof that a config made from it survives the trip through its bytes.
//
// A node's config is the template with the node patch applied (talosNodePatch). That patch sets
// only typed fields from values fleetd checked before (the hostname, a MAC, addresses, a disk
// serial, the node files as UTF-8 text), so what its bytes can add to the template's is what the
// YAML encoder writes for strings and lists, which the first load proved. Every config is still
// validated in metal mode and its machine.files checked (validateTalos), so nothing Talos would
// refuse of the merged config is served.

// maxTemplates bounds the cache: a catalogue has a handful of classes, and an edited class is a
// new key; past the bound the cache starts again.
const maxTemplates = 64

// talosTemplate is one class's part of its nodes' Talos configs.
type talosTemplate struct {
	cfg config.Provider // read only: configpatcher's strategic merge clones it
	// loaded is set once a config made from this template has been loaded back from its bytes
	// and validated (ValidateTalosConfig).
	loaded atomic.Bool
}

// validate checks one node's config: loaded back from its bytes and validated until that has
// passed once for the template, then validated in memory. body may be nil once it has passed.
func (t *talosTemplate) validate(cfg config.Provider, body []byte) ([]string, error) {
	if t.loaded.Load() {
		return validateTalos(cfg)
	}
	warnings, err := ValidateTalosConfig(body)
	if err == nil {
		t.loaded.Store(true)
	}
	return warnings, err
}

// templates caches talosTemplates by machine type and the class's patches (their bytes, so an
// edited class never finds the old template). A class whose patches are refused is not cached.
type templates struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*talosTemplate
}

func templateKey(c fleet.Class) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	joins := []byte("outside")
	if c.JoinsKubernetes {
		joins = []byte("joins")
	}
	for _, part := range append([][]byte{[]byte(c.Talos.MachineType), joins}, rawPatches(c)...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func rawPatches(c fleet.Class) [][]byte {
	out := make([][]byte, len(c.Talos.Patches))
	for i, p := range c.Talos.Patches {
		out[i] = p
	}
	return out
}

// template returns class c's template, building it on first use. Two renders racing to build the
// same one both build it; the second is kept, and both are correct.
func (g *talosGenerator) template(c fleet.Class, mt machine.Type) (*talosTemplate, error) {
	k := templateKey(c)
	g.templates.mu.Lock()
	t := g.templates.m[k]
	g.templates.mu.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := g.buildTemplate(c, mt)
	if err != nil {
		return nil, err
	}
	g.templates.mu.Lock()
	defer g.templates.mu.Unlock()
	if g.templates.m == nil || len(g.templates.m) >= maxTemplates {
		g.templates.m = map[[sha256.Size]byte]*talosTemplate{}
	}
	g.templates.m[k] = t
	return t, nil
}

// membershipControlPlane is what the control plane of a cluster whose nodes fleetd admits needs
// (docs/operate.md, "The workload cluster"): kube-controller-manager's own CSR approver off
// (Talos adds the controllers list to its own "*,tokencleaner"), so that only fleetd decides the
// kubelets' CSRs, and the kubelet certificates it signs valid for 24 hours, so that a node whose
// device stops passing its checks loses its client certificate within a day of its last
// renewal. With an authorization webhook configured, authzPatch follows it. A class's own
// patches come after them and may change them.
const membershipControlPlane = `{"cluster":{"controllerManager":{"extraArgs":{"controllers":"-csrapproving","cluster-signing-duration":"24h"}}}}`

// buildTemplate generates the machine config for the machine type and applies the class's
// patches in order.
func (g *talosGenerator) buildTemplate(c fleet.Class, mt machine.Type) (*talosTemplate, error) {
	base, err := g.input.Config(mt)
	if err != nil {
		return nil, fmt.Errorf("generate Talos %s config: %w", c.Talos.MachineType, err)
	}
	patches := make([]configpatcher.Patch, 0, len(c.Talos.Patches)+2)
	if c.JoinsKubernetes && mt == machine.TypeControlPlane {
		p, err := configpatcher.LoadPatch([]byte(membershipControlPlane))
		if err != nil {
			return nil, fmt.Errorf("load fleetd's control plane patch: %w", err)
		}
		patches = append(patches, p)
		if g.authz != nil {
			if p, err = authzPatch(g.authz); err != nil {
				return nil, err
			}
			patches = append(patches, p)
		}
	}
	for i, raw := range c.Talos.Patches {
		p, err := configpatcher.LoadPatch(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: load patch %d of class %s: %s", fleet.ErrConfigRejected, i, c.Name, oneLine(err.Error()))
		}
		patches = append(patches, p)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), patches)
	if err != nil {
		return nil, fmt.Errorf("%w: apply the patches of class %s: %s", fleet.ErrConfigRejected, c.Name, oneLine(err.Error()))
	}
	cfg, err := out.Config()
	if err != nil {
		return nil, fmt.Errorf("%w: load the patched config of class %s: %s", fleet.ErrConfigRejected, c.Name, oneLine(err.Error()))
	}
	return &talosTemplate{cfg: cfg}, nil
}

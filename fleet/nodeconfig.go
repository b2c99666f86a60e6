package fleet

import (
	"errors"

	"github.com/folly-infra/fleetd/api"
)

// A node's configuration is rendered from the device's declaration, its class and what
// attestation verified (the Renderer port, ports.go; package render implements it) and served
// once (deliver.go).

// ErrConfigRejected is wrapped by a Renderer when the device's declaration or its class would
// produce a configuration the OS rejects (Talos validation in metal mode, a class patch that does
// not apply, an address the seed cannot carry). The text after it is safe to journal. Any other
// error from a Renderer is fleetd's own failure.
var ErrConfigRejected = errors.New("configuration would be rejected")

// NodeIdentity is what attestation verified about the machine the configuration is for, and the
// files of the identity fleetd gave it.
type NodeIdentity struct {
	UUID   string // SMBIOS system UUID reported by the agent, bound to the attested TPM
	Serial string // SMBIOS system serial reported by the agent, may be empty
	// Files are delivered into NodeDir on the node by every kind of configuration (nodefiles.go):
	// for a provision, the LAK files its boot checks read (LAKFiles).
	Files []api.NodeFile
	// BootstrapToken is the kubelet bootstrap token a Talos configuration carries in
	// cluster.token (bootstraptoken.go); zero for the other kinds.
	BootstrapToken BootstrapToken
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

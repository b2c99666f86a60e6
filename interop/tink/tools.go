//go:build tools

// Package tink pins Tinkerbell's own components, which the development stack runs for real
// (docs/design.md, "Development stack"): scripts/tools.sh builds tink-controller, tink-server,
// tink-worker and virtual-worker from this module, so its go.mod and go.sum choose their version
// and every dependency's. Nothing here is fleetd code; the module only exists so that the tink
// module's dependencies stay out of fleetd's own go.mod.
package tink

import (
	_ "github.com/tinkerbell/tink/cmd/tink-controller"
	_ "github.com/tinkerbell/tink/cmd/tink-server"
	_ "github.com/tinkerbell/tink/cmd/tink-worker"
	_ "github.com/tinkerbell/tink/cmd/virtual-worker"
)

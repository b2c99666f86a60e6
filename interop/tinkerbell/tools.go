//go:build tools

// Package tinkerbell pins the current Tinkerbell, which the development stack runs for real
// (docs/design.md, "Development stack"): scripts/tools.sh builds `tinkerbell` (controller and
// server; no build tags, so without its embedded etcd, kube-apiserver and controller-manager)
// and `tink-agent` from this module, so its go.mod and go.sum choose their version and every
// dependency's. Tinkerbell v0.25.0 requires k8s.io/kubernetes v1.36.3 exactly, so Kubernetes'
// own programs of that version build from this module too: one line here and one in
// scripts/tools.sh each (kube-apiserver and kube-controller-manager, which the cluster tests
// run for real: dev/kubecluster). Nothing here is fleetd code; the module exists so that Tinkerbell's
// dependencies stay out of fleetd's own go.mod.
package tinkerbell

import (
	_ "github.com/tinkerbell/tinkerbell/cmd/agent"
	_ "github.com/tinkerbell/tinkerbell/cmd/tinkerbell"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)

package workflows

import (
	"fmt"
	"slices"
	"strings"
)

// Version is the Tinkerbell a site runs, as fleetd meets it (kubernetes.tinkerbell_version,
// docs/operate.md "Tinkerbell"): it decides how fleetd renders and checks a Template before it
// creates a Workflow from it (RenderTemplate, CheckTemplate). fleetd reads both versions'
// Workflows whatever the setting (Workflow), and writes only the Hardware fields it owns (a merge
// patch), so that the fields of either version survive.
type Version string

const (
	// TinkerbellV025 is the tinkerbell/tinkerbell monorepo's v0.25 (tested with v0.25.0): one
	// `tinkerbell` binary and tink-agent. The default.
	TinkerbellV025 Version = "v0.25"
	// TinkerbellV012 is tink v0.12 (tested with v0.12.2): tink-controller, tink-server and
	// tink-worker.
	TinkerbellV012 Version = "v0.12"
)

// DefaultVersion is the version fleetd assumes when the configuration names none.
const DefaultVersion = TinkerbellV025

// Versions are the versions fleetd supports, the default first.
var Versions = []Version{TinkerbellV025, TinkerbellV012}

// ParseVersion reads kubernetes.tinkerbell_version: "" is DefaultVersion.
func ParseVersion(s string) (Version, error) {
	if s == "" {
		return DefaultVersion, nil
	}
	if v := Version(s); slices.Contains(Versions, v) {
		return v, nil
	}
	return "", fmt.Errorf("Tinkerbell version %q is not one fleetd supports: give %s", s, knownVersions())
}

func knownVersions() string {
	var s []string
	for _, v := range Versions {
		s = append(s, string(v))
	}
	return strings.Join(s, " or ")
}

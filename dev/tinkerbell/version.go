package tinkerbell

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is a Tinkerbell release the development stack runs, by its own programs.
type Version string

const (
	// V025 is the current Tinkerbell, the tinkerbell/tinkerbell monorepo's v0.25.0: one
	// `tinkerbell` process runs the controller and the server (its other services off), and a
	// netbooting machine runs `tink-agent` with its docker runtime. The default.
	V025 Version = "v0.25.0"
	// V012 is tink v0.12.2: tink-controller and tink-server, and tink-worker on a netbooting
	// machine. make test-compat runs the lifecycle tests against it.
	V012 Version = "v0.12.2"
)

// VersionEnv names the environment variable that selects the version for the tests and
// `fleetsim up` (make test-compat sets it to v0.12.2); unset is V025.
const VersionEnv = "FLEETD_TINKERBELL"

// VersionFromEnv is the version VersionEnv selects.
func VersionFromEnv() (Version, error) {
	return ParseVersion(os.Getenv(VersionEnv))
}

// ParseVersion reads a version: v0.25.0 or v0.12.2 (v0.25 and v0.12 too); empty is V025.
func ParseVersion(s string) (Version, error) {
	switch strings.TrimSpace(s) {
	case "", string(V025), "v0.25":
		return V025, nil
	case string(V012), "v0.12":
		return V012, nil
	}
	return "", fmt.Errorf("Tinkerbell version %q: the development stack runs %s (the default) or %s (make test-compat)", s, V025, V012)
}

// Tools are the programs of the version that scripts/tools.sh builds: the ones the stack runs,
// then the one a netbooting machine runs.
func (v Version) Tools() []string {
	if v == V012 {
		return []string{"tink-controller", "tink-server", "tink-worker"}
	}
	return []string{"tinkerbell", "tink-agent"}
}

// FleetdSetting is fleetd's kubernetes.tinkerbell_version for this version.
func (v Version) FleetdSetting() string {
	if v == V012 {
		return "v0.12"
	}
	return "v0.25"
}

// CRDDirs are the directories of the CRDs the version's controller needs in the API server, as
// the interop module that builds it has them (root is the fleetd checkout): v0.25's own
// crd/bases/v1alpha1 (Hardware, Template, Workflow, WorkflowRuleSet, and Rufio's Job, Machine
// and Task), or tink v0.12.2's config/crd/bases and Rufio v0.6.1's (the controller deletes and
// creates Rufio Jobs for a Workflow with bootOptions.bootMode). CRD YAML is not Go code, so it is
// found through the go command in the module's directory.
func (v Version) CRDDirs(ctx context.Context, root string) ([]string, error) {
	if v == V012 {
		tink, err := moduleDir(ctx, root, "tink", "github.com/tinkerbell/tink")
		if err != nil {
			return nil, err
		}
		rufio, err := moduleDir(ctx, root, "tink", "github.com/tinkerbell/rufio")
		if err != nil {
			return nil, err
		}
		return []string{filepath.Join(tink, "config", "crd", "bases"), filepath.Join(rufio, "config", "crd", "bases")}, nil
	}
	dir, err := moduleDir(ctx, root, "tinkerbell", "github.com/tinkerbell/tinkerbell")
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(dir, "crd", "bases", "v1alpha1")}, nil
}

// moduleDir is a module's directory in the module cache, as interop/<interop> requires it.
func moduleDir(ctx context.Context, root, interop, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = filepath.Join(root, "interop", interop)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("locate %s with `go list -m %s` in %s: %v (run `go mod download` there)", module, module, cmd.Dir, err)
	}
	return dir, nil
}

// Container is the name the version's worker gives an action's container: tink-agent v0.25's
// (AgentContainerName, with the action's id) or tink-worker v0.12.2's (ContainerName).
func (v Version) Container(a Action) string {
	if v == V012 {
		return ContainerName(a.Name)
	}
	return AgentContainerName(a.Name, a.ID)
}

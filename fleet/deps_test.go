package fleet_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The domain talks to the outside only through its ports (ports.go); the adapters import fleet,
// never the other way round (docs/design.md, "Packages": main → adapters → fleet → attest, pki).

// forbiddenImports are the imports no file of fleet may have, directly or through another package:
// the adapters' protocols and clients, and every fleetd package but attest and pki.
var forbiddenImports = []string{
	"net/http",                              // the handlers' and the webhook's (checked on direct imports)
	"github.com/netbox-community/go-netbox", // the netbox adapter's client
	"sigs.k8s.io/controller-runtime",        // the workflows adapter's client
	"k8s.io",                                // Kubernetes types and clients
	"github.com/tinkerbell",                 // Tinkerbell's API types
	"github.com/hashicorp/go-retryablehttp", // the agent's and the adapters' HTTP retries
	"github.com/gorilla/mux",                // the route table
	// Configuration rendering's (package render, behind the Renderer port): Talos machinery and YAML.
	"github.com/siderolabs/talos/pkg/machinery",
	"gopkg.in/yaml.v3", "gopkg.in/yaml.v2", "sigs.k8s.io/yaml", "github.com/ghodss/yaml", "go.yaml.in/yaml",
}

// fleetdImports are the only fleetd packages fleet may depend on: api only for the node files'
// names, which the agent shares; netbox/layout for the values fleetd stores in NetBox, which the
// domain decides on (a leaf: no client and no I/O, the package map holds it importing nothing).
var fleetdImports = []string{"github.com/folly-infra/fleetd/attest", "github.com/folly-infra/fleetd/pki", "github.com/folly-infra/fleetd/api",
	"github.com/folly-infra/fleetd/netbox/layout", "github.com/folly-infra/fleetd/fleet"}

// importUnder reports whether import path p is prefix or a package under it.
func importUnder(p, prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

// TestDeps reads each non-test file's imports (a new adapter import fails here, by file) and the
// package's whole dependency graph (one through another package fails too). net/http is checked
// on direct imports only: the Prometheus client depends on it.
func TestDeps(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			checkDomainImport(t, name, p)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/folly-infra/fleetd/fleet").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	through := map[string][]string{} // forbidden prefix → the packages under it fleet depends on
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range forbiddenImports {
			if importUnder(p, bad) && bad != "net/http" {
				through[bad] = append(through[bad], p)
			}
		}
		if strings.HasPrefix(p, "github.com/folly-infra/fleetd/") && !slices.Contains(fleetdImports, p) {
			through[p] = append(through[p], p)
		}
	}
	for bad, pkgs := range through {
		t.Errorf("fleet depends on %s (%d packages, first %s): find the import with go list -deps or go mod why", bad, len(pkgs), pkgs[0])
	}
}

func checkDomainImport(t *testing.T, file, p string) {
	t.Helper()
	for _, bad := range forbiddenImports {
		if importUnder(p, bad) {
			t.Errorf("fleet/%s imports %s: the domain reaches the outside only through its ports (ports.go)", file, p)
		}
	}
	if strings.HasPrefix(p, "github.com/folly-infra/fleetd/") && !slices.Contains(fleetdImports, p) {
		t.Errorf("fleet/%s imports fleetd's %s: the domain imports only attest, pki, api and netbox/layout", file, p)
	}
}

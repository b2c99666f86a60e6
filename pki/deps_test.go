package pki_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps pki pure (docs/design.md, "Packages"): no HTTP, no NetBox, no Kubernetes, nothing of fleetd.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/folly-infra/fleetd/pki").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "net/http", strings.Contains(p, "go-netbox"), strings.Contains(p, "controller-runtime"),
			strings.HasPrefix(p, "github.com/folly-infra/fleetd/") && p != "github.com/folly-infra/fleetd/pki":
			t.Errorf("pki depends on %s", p)
		}
	}
}

package attest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps attest pure (docs/design.md, "Packages"): no HTTP, no NetBox, no Kubernetes, nothing of fleetd.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/folly-infra/fleetd/attest").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "net/http", strings.Contains(p, "go-netbox"), strings.Contains(p, "controller-runtime"),
			strings.HasPrefix(p, "github.com/folly-infra/fleetd/") && p != "github.com/folly-infra/fleetd/attest":
			t.Errorf("attest depends on %s", p)
		}
	}
}

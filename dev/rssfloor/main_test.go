package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestFloorImportsFleetd: the floor links what fleetd's main imports (every package outside the
// standard library), so that a new dependency of fleetd is in the floor too.
func TestFloorImportsFleetd(t *testing.T) {
	list := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		var third []string
		for _, p := range strings.Fields(string(out)) {
			if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
				third = append(third, p)
			}
		}
		return third
	}
	fleetd, floor := list("github.com/folly-infra/fleetd"), list(".")
	if len(fleetd) < 10 {
		t.Fatalf("fleetd's main imports %d packages outside the standard library: the listing is wrong", len(fleetd))
	}
	for _, p := range fleetd {
		if !slices.Contains(floor, p) {
			t.Errorf("fleetd imports %s and the floor does not: add it to dev/rssfloor/main.go", p)
		}
	}
}

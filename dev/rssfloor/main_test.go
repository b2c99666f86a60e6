package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestFloorImportsFleetd: the floor links exactly the packages fleetd's binary links (every one
// outside the standard library, its main and the floor's own aside), so that a new dependency of
// fleetd is in the floor too, and nothing the floor imports that fleetd does not raises it.
func TestFloorImportsFleetd(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		var linked []string
		for _, p := range strings.Fields(string(out)) {
			if p != "github.com/folly-infra/fleetd" && p != "github.com/folly-infra/fleetd/dev/rssfloor" {
				linked = append(linked, p)
			}
		}
		slices.Sort(linked)
		return linked
	}
	fleetd, floor := deps("github.com/folly-infra/fleetd"), deps(".")
	if len(fleetd) < 100 {
		t.Fatalf("fleetd links %d packages outside the standard library: the listing is wrong", len(fleetd))
	}
	for _, p := range fleetd {
		if _, found := slices.BinarySearch(floor, p); !found {
			t.Errorf("fleetd links %s and the floor does not: import it (or what imports it) in dev/rssfloor/main.go", p)
		}
	}
	for _, p := range floor {
		if _, found := slices.BinarySearch(fleetd, p); !found {
			t.Errorf("the floor links %s and fleetd does not: drop its import from dev/rssfloor/main.go", p)
		}
	}
}

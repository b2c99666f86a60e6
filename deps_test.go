package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The package map: what each of fleetd's packages imports of the others, as docs/design.md
// ("Packages") states it, held against what the code imports (tailscale's cmd/derper TestDeps,
// for the whole module).

const module = "github.com/folly-infra/fleetd"

// packageMap is the map as the document writes it: each package (by its path in the module,
// "main" for the root) with the fleetd packages it imports, in the document's order.
type packageMap struct {
	order    []string
	imports  map[string][]string
	fixtures map[string]bool
}

// readPackageMap reads the first text block after the "## Packages" heading: one line per
// package, "NAME → IMPORT IMPORT ..." ("–" for none), "(fixture)" at the end of a fixture's.
func readPackageMap(t *testing.T, path string) packageMap {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := packageMap{imports: map[string][]string{}, fixtures: map[string]bool{}}
	sc := bufio.NewScanner(f)
	section, block := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Packages":
			section = true
		case section && !block && line == "```text":
			block = true
		case block && line == "```":
			return m
		case block:
			name, deps, ok := strings.Cut(line, "→")
			if !ok {
				t.Fatalf("%s: package map line %q has no →", path, line)
			}
			name = strings.TrimSpace(name)
			deps, fixture := strings.CutSuffix(strings.TrimSpace(deps), "(fixture)")
			list := strings.Fields(deps)
			if len(list) == 1 && list[0] == "–" {
				list = nil
			}
			m.order = append(m.order, name)
			m.imports[name] = list
			m.fixtures[name] = fixture
		}
	}
	t.Fatalf("%s has no package map (a ```text block under \"## Packages\")", path)
	return m
}

// goPackages lists every package of the module that has code besides its tests, with the
// fleetd packages that code imports (go list's Imports leaves test files out), by the map's
// names.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .GoFiles}} {{len .CgoFiles}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderrOf(err))
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if f[1] == "0" && f[2] == "0" {
			continue // tests only
		}
		var own []string
		for _, imp := range f[3:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				own = append(own, mapName(imp))
			}
		}
		slices.Sort(own)
		pkgs[mapName(f[0])] = own
	}
	return pkgs
}

func mapName(importPath string) string {
	if importPath == module {
		return "main"
	}
	return strings.TrimPrefix(importPath, module+"/")
}

func underDev(name string) bool { return name == "dev" || strings.HasPrefix(name, "dev/") }

// mapProblems compares the code's packages (pkgs: each with its fleetd imports) and what
// bin/fleetd links (binary: map names) with the map, one sentence per difference.
func mapProblems(m packageMap, pkgs map[string][]string, binary []string) []string {
	var p []string
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if underDev(name) {
			continue // the development stack may import anything
		}
		for _, imp := range pkgs[name] {
			if underDev(imp) {
				p = append(p, fmt.Sprintf("%s imports %s: code outside dev/ that is not a test must not import the development stack", name, imp))
			}
		}
		want, mapped := m.imports[name]
		if !mapped {
			p = append(p, fmt.Sprintf("package %s is not on the map: add its line to docs/design.md's package map", name))
			continue
		}
		for _, imp := range pkgs[name] {
			if !underDev(imp) && !slices.Contains(want, imp) {
				p = append(p, fmt.Sprintf("%s imports %s, which the map does not show: remove the import, or add it to the map with its reason", name, imp))
			}
		}
		for _, imp := range want {
			if !slices.Contains(pkgs[name], imp) {
				p = append(p, fmt.Sprintf("the map shows %s importing %s, which it does not: take it off the map", name, imp))
			}
		}
	}
	at := map[string]int{}
	for i, name := range m.order {
		at[name] = i
	}
	for _, name := range m.order {
		if _, ok := pkgs[name]; !ok {
			p = append(p, fmt.Sprintf("the map names %s, which is not a package with code: take it off the map", name))
		}
		if m.fixtures[name] {
			continue
		}
		for _, imp := range m.imports[name] {
			if i, ok := at[imp]; ok && i < at[name] {
				p = append(p, fmt.Sprintf("the map has %s import %s, listed above it: imports point down the list", name, imp))
			}
		}
	}
	for _, name := range binary {
		if m.fixtures[name] {
			p = append(p, fmt.Sprintf("bin/fleetd links the test fixture %s: import it from tests only", name))
		}
	}
	return p
}

// TestPackageMap holds the code to the package map docs/design.md opens with.
func TestPackageMap(t *testing.T) {
	m := readPackageMap(t, "docs/design.md")
	var binary []string
	for _, p := range goListDeps(t, ".", "arm64") {
		if p == module || strings.HasPrefix(p, module+"/") {
			binary = append(binary, mapName(p))
		}
	}
	if len(binary) < 10 {
		t.Fatalf("go list -deps . named %d fleetd packages: the list is not bin/fleetd's", len(binary))
	}
	for _, problem := range mapProblems(m, goPackages(t), binary) {
		t.Error(problem)
	}
}

// TestMapProblemsFinds runs the comparison over maps and packages that differ, so that the test
// above can fail.
func TestMapProblemsFinds(t *testing.T) {
	m := packageMap{order: []string{"main", "cli", "fleet", "fleet/fleettest"},
		imports:  map[string][]string{"main": {"cli", "fleet"}, "cli": {"fleet"}, "fleet": nil, "fleet/fleettest": {"fleet"}},
		fixtures: map[string]bool{"fleet/fleettest": true}}
	same := func() map[string][]string {
		return map[string][]string{"main": {"cli", "fleet"}, "cli": {"fleet"}, "fleet": nil, "fleet/fleettest": {"fleet"},
			"dev/stack": {"cli", "fleet", "main"}}
	}
	for _, tc := range []struct {
		name   string
		edit   func(map[string][]string)
		binary []string
		want   string // "" for no problem
	}{
		{"ok/the code is the map", func(map[string][]string) {}, []string{"main", "cli", "fleet"}, ""},
		{"refuse/product-code-imports-dev", func(p map[string][]string) { p["cli"] = []string{"dev/stack", "fleet"} }, nil,
			"cli imports dev/stack: code outside dev/ that is not a test must not import the development stack"},
		{"refuse/an-import-off-the-map", func(p map[string][]string) { p["fleet"] = []string{"cli"} }, nil,
			"fleet imports cli, which the map does not show"},
		{"refuse/the-map-shows-a-gone-import", func(p map[string][]string) { p["main"] = []string{"fleet"} }, nil,
			"the map shows main importing cli, which it does not"},
		{"refuse/a-package-off-the-map", func(p map[string][]string) { p["kea"] = nil }, nil,
			"package kea is not on the map"},
		{"refuse/the-map-names-no-package", func(p map[string][]string) { delete(p, "fleet/fleettest") }, nil,
			"the map names fleet/fleettest, which is not a package with code"},
		{"refuse/the-binary-links-a-fixture", func(map[string][]string) {}, []string{"main", "fleet/fleettest"},
			"bin/fleetd links the test fixture fleet/fleettest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := same()
			tc.edit(pkgs)
			got := mapProblems(m, pkgs, tc.binary)
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)) {
				t.Errorf("problems = %q, want %q", got, tc.want)
			}
		})
	}
	upward := packageMap{order: []string{"fleet", "cli"}, imports: map[string][]string{"fleet": nil, "cli": {"fleet"}},
		fixtures: map[string]bool{}}
	got := mapProblems(upward, map[string][]string{"fleet": nil, "cli": {"fleet"}}, nil)
	if len(got) != 1 || !strings.Contains(got[0], "the map has cli import fleet, listed above it") {
		t.Errorf("a map listed upwards: problems = %q", got)
	}
}

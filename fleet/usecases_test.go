package fleet_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maxMethods bounds the methods of any one type of the domain (docs/design.md, "The domain by use
// case"): a type past it is doing more than one use case's work.
const maxMethods = 25

// useCase is one line of docs/design.md's use-case map.
type useCase struct {
	deps    []string
	methods int
}

// readUseCaseMap reads the text block under docs/design.md's "### The domain by use case": one
// line per type, "Type → dependency ... description (methods)".
func readUseCaseMap(t *testing.T, path string) map[string]useCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]useCase{}
	section, block := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case line == "### The domain by use case":
			section = true
		case section && !block && line == "```text":
			block = true
		case block && line == "```":
			return m
		case block:
			name, rest, ok := strings.Cut(line, "→")
			if !ok {
				t.Fatalf("%s: use-case line %q has no →", path, line)
			}
			var deps []string
			for _, w := range strings.Fields(rest) {
				if w != "core" && w != "foreignWrites" && w != "nodeCleanup" && (w == "" || w[0] < 'A' || w[0] > 'Z') {
					break // the description starts
				}
				deps = append(deps, w)
			}
			open := strings.LastIndex(rest, "(")
			n, err := strconv.Atoi(strings.TrimSuffix(rest[open+1:], ")"))
			if open < 0 || err != nil {
				t.Fatalf("%s: use-case line %q does not end with its count of methods in parentheses", path, line)
			}
			m[strings.TrimSpace(name)] = useCase{deps: deps, methods: n}
		}
	}
	t.Fatalf("%s has no use-case map (a ```text block under \"### The domain by use case\")", path)
	return nil
}

// domainTypes parses the package's code (not its tests): each type's struct fields' type names
// and its methods.
func domainTypes(t *testing.T) (fields map[string][]string, methods map[string][]string, interfaces map[string]bool) {
	t.Helper()
	fields, methods, interfaces = map[string][]string{}, map[string][]string{}, map[string]bool{}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					methods[typeName(d.Recv.List[0].Type)] = append(methods[typeName(d.Recv.List[0].Type)], d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					switch tt := ts.Type.(type) {
					case *ast.InterfaceType:
						interfaces[ts.Name.Name] = true
					case *ast.StructType:
						for _, fl := range tt.Fields.List {
							if len(fl.Names) == 0 {
								fields[ts.Name.Name] = append(fields[ts.Name.Name], "embedded "+typeName(fl.Type))
								continue
							}
							fields[ts.Name.Name] = append(fields[ts.Name.Name], typeName(fl.Type))
						}
					}
				}
			}
		}
	}
	return fields, methods, interfaces
}

// typeName is a type expression's name without its pointer, package or type arguments.
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return typeName(x.X)
	}
	return ""
}

// TestUseCaseMap holds the domain's types to docs/design.md's use-case map: each use case holds
// the core and only the ports its line names (a port is one of the package's interfaces, the
// class catalogue, the attestation wiring, the certificate issuer or the randomness); no type of
// the package has more than maxMethods methods, nor embeds another use case's.
func TestUseCaseMap(t *testing.T) {
	want := readUseCaseMap(t, "../docs/design.md")
	fields, methods, interfaces := domainTypes(t)
	port := func(name string) (string, bool) {
		switch {
		case name == "trustedNetBox":
			return "NetBox", true // the port, read judged and written sealed
		case interfaces[name], slices.Contains([]string{"Random", "Catalog", "Attestation", "Issuer", "core", "foreignWrites", "nodeCleanup"}, name):
			return name, true
		}
		return "", false
	}
	for typ, uc := range want {
		fs, ok := fields[typ]
		if !ok {
			t.Errorf("docs/design.md's use-case map names %s, which is not a struct of package fleet", typ)
			continue
		}
		var got []string
		for _, f := range fs {
			if strings.HasPrefix(f, "embedded ") {
				t.Errorf("%s embeds %s: a use case names what it holds, so its methods are only its own", typ, strings.TrimPrefix(f, "embedded "))
			}
			if p, ok := port(f); ok && !slices.Contains(got, p) {
				got = append(got, p)
			}
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(uc.deps))
		if !slices.Equal(got, w) {
			t.Errorf("%s holds %v, docs/design.md's use-case map says %v: change the one that is wrong", typ, got, w)
		}
		if n := len(methods[typ]); n != uc.methods {
			t.Errorf("%s has %d methods, docs/design.md's use-case map says %d", typ, n, uc.methods)
		}
	}
	for typ, ms := range methods {
		if len(ms) > maxMethods {
			t.Errorf("%s has %d methods, more than %d: split it by use case (docs/design.md, \"The domain by use case\")", typ, len(ms), maxMethods)
		}
	}
	if fs := fields["Service"]; len(methods["Service"]) > 0 {
		t.Errorf("Service has methods %v: it only holds the use cases (%v)", methods["Service"], fs)
	}
}

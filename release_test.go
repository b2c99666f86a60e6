package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// releaseArches are the targets of `make release`: spore is linux/arm64; HookOS and the
// amd64 nodes run linux/amd64.
var releaseArches = []string{"arm64", "amd64"}

// notInProduction names what the production binary must not link (docs/design.md, "Packages": the
// development stack lives apart so the binary for spore stays lean). Each entry is an import
// path; it matches the path itself and every package below it.
var notInProduction = []struct{ path, why string }{
	{"go.etcd.io/etcd", "etcd (the development Kubernetes API)"},
	{"k8s.io/apiextensions-apiserver", "the CRD API server (development stack)"},
	{"k8s.io/apiserver", "the Kubernetes API server library (development stack)"},
	{"github.com/folly-infra/fleetd/dev", "the development stack (emulator, harness, simulated machines)"},
	{"github.com/google/go-tpm-tools/simulator", "the TPM simulator (cgo, tests only)"},
	{"github.com/spiffe/spire", "SPIRE (fleetd issues what SPIRE verifies; it never links SPIRE)"},
	{"github.com/spiffe/spire-plugin-sdk", "SPIRE's plugin SDK"},
	{"sigs.k8s.io/controller-runtime/pkg/client", "controller-runtime's client, which registers every built-in Kubernetes API group at start (workflows/kube.go; docs/operate.md#memory)"},
	{"k8s.io/client-go/kubernetes/scheme", "client-go's scheme of every built-in Kubernetes API group (workflows/kube.go)"},
	{"quamina.net/go/quamina", "the quamina replacement (interop/quamina), which only interop/tinkerbell's build of Tinkerbell may link"},
	{"github.com/tinkerbell/tinkerbell", "Tinkerbell v0.25's module, whose API types would move fleetd's k8s.io/* modules to v0.36 and etcd to 3.6 (fleetd reads both Tinkerbell versions as JSON: workflows/status.go)"},
}

// forbiddenIn returns one line per package of pkgs that notInProduction names.
func forbiddenIn(pkgs []string) []string {
	var bad []string
	for _, p := range pkgs {
		for _, f := range notInProduction {
			if p == f.path || strings.HasPrefix(p, f.path+"/") {
				bad = append(bad, p+": "+f.why)
			}
		}
	}
	return bad
}

// goListDeps lists the packages pkg links when built as a release binary for linux/arch; a pkg
// "DIR:PATH" lists package PATH as the module in directory DIR has it.
func goListDeps(t *testing.T, pkg, arch string) []string {
	t.Helper()
	dir, path, inModule := strings.Cut(pkg, ":")
	if !inModule {
		dir, path = ".", pkg
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{.ImportPath}}", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list the packages of %s for linux/%s: %v\n%s", pkg, arch, err, stderrOf(err))
	}
	return strings.Fields(string(out))
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

func TestProductionBinaryLeavesOutTheDevelopmentStack(t *testing.T) {
	for _, arch := range releaseArches {
		t.Run("linux-"+arch, func(t *testing.T) {
			pkgs := goListDeps(t, ".", arch)
			if len(pkgs) < 100 {
				t.Fatalf("go list found %d packages in fleetd: the list is not the binary's", len(pkgs))
			}
			if bad := forbiddenIn(pkgs); len(bad) > 0 {
				t.Errorf("the production binary links %d package(s) it must not; move the import behind dev/ or a test:\n  %s",
					len(bad), strings.Join(bad, "\n  "))
			}
		})
	}
}

// TestForbiddenInCatchesTheDevelopmentStack runs the same check over package lists that do hold
// the development stack, so the test above can fail.
func TestForbiddenInCatchesTheDevelopmentStack(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkgs []string
		want []string // substrings, one per expected finding
	}{
		{name: "ok/adapters", pkgs: []string{"github.com/folly-infra/fleetd/workflows", "k8s.io/client-go/rest", "k8s.io/apimachinery/pkg/runtime", "github.com/google/go-tpm-tools/client", "github.com/folly-infra/fleetd/devices"}},
		{name: "refuse/etcd", pkgs: []string{"go.etcd.io/etcd/server/v3/embed"}, want: []string{"go.etcd.io/etcd/server/v3/embed"}},
		{name: "refuse/apiextensions", pkgs: []string{"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"}, want: []string{"apiextensions"}},
		{name: "refuse/apiserver", pkgs: []string{"k8s.io/apiserver/pkg/server"}, want: []string{"k8s.io/apiserver/pkg/server"}},
		{name: "refuse/emulator", pkgs: []string{"github.com/folly-infra/fleetd/dev/netboxemu"}, want: []string{"dev/netboxemu"}},
		{name: "refuse/simulator", pkgs: []string{"github.com/google/go-tpm-tools/simulator/internal"}, want: []string{"simulator"}},
		{name: "refuse/every Kubernetes API group", pkgs: []string{"sigs.k8s.io/controller-runtime/pkg/client/apiutil", "k8s.io/client-go/kubernetes/scheme"}, want: []string{"controller-runtime", "client-go's scheme"}},
		{name: "ok/controller-runtime's scheme builder (tink's API types use it)", pkgs: []string{"sigs.k8s.io/controller-runtime/pkg/scheme", "k8s.io/client-go/dynamic"}},
		{name: "refuse/spire", pkgs: []string{"github.com/spiffe/spire/pkg/agent"}, want: []string{"spire/pkg/agent"}},
		{name: "ok/SPIRE's API client (the agent ban, spire/)", pkgs: []string{"github.com/spiffe/spire-api-sdk/proto/spire/api/server/agent/v1"}},
		{name: "refuse/quamina and Tinkerbell v0.25's types", pkgs: []string{"quamina.net/go/quamina", "github.com/tinkerbell/tinkerbell/api/v1alpha1/tinkerbell"},
			want: []string{"quamina replacement", "tinkerbell/tinkerbell/api"}},
		{name: "ok/tink v0.12.2's API types", pkgs: []string{"github.com/tinkerbell/tink/api/v1alpha1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := forbiddenIn(tc.pkgs)
			if len(got) != len(tc.want) {
				t.Fatalf("forbiddenIn(%v) = %q, want %d finding(s)", tc.pkgs, got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d = %q, want it to name %q", i, got[i], w)
				}
			}
		})
	}
	// A real list: the development stack's binary links etcd, the CRD API server and itself.
	got := strings.Join(forbiddenIn(goListDeps(t, "./dev/fleetsim", "amd64")), "\n")
	for _, w := range []string{"go.etcd.io/etcd/server/v3", "k8s.io/apiextensions-apiserver/", "k8s.io/apiserver/", "fleetd/dev/stack"} {
		if !strings.Contains(got, w) {
			t.Errorf("forbiddenIn(go list -deps ./dev/fleetsim) does not name %s; it found:\n%s", w, got)
		}
	}
	// Another real one: Tinkerbell v0.25 as interop/tinkerbell builds it links the replacement.
	got = strings.Join(forbiddenIn(goListDeps(t, "./interop/tinkerbell:github.com/tinkerbell/tinkerbell/cmd/tinkerbell", "amd64")), "\n")
	for _, w := range []string{"quamina.net/go/quamina", "github.com/tinkerbell/tinkerbell/tink/controller"} {
		if !strings.Contains(got, w) {
			t.Errorf("forbiddenIn(go list -deps of interop/tinkerbell's tinkerbell) does not name %s; it found:\n%s", w, got)
		}
	}
}

// TestFleetdModuleLeavesOutQuamina: the quamina replacement is required only by interop/tinkerbell,
// and Tinkerbell v0.25's module not at all: fleetd's own module graph names neither (README, "The
// development stack").
func TestFleetdModuleLeavesOutQuamina(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, stderrOf(err))
	}
	mods := strings.Fields(string(out))
	if len(mods) < 100 {
		t.Fatalf("go list -m all listed %d fields: not fleetd's module graph", len(mods))
	}
	for _, m := range mods {
		if m == "quamina.net/go/quamina" || strings.HasPrefix(m, "github.com/tinkerbell/tinkerbell") {
			t.Errorf("fleetd's module graph requires %s: only interop/tinkerbell may", m)
		}
	}
}

// maxReleaseSize bounds a release binary: 35.5 MiB (arm64) and 37.9 MiB (amd64) on 2026-12-03,
// with room for growth. What is resident at rest follows the binary's size (docs/operate.md,
// "Memory"), so a binary that doubles is a regression even when every test passes.
const maxReleaseSize = 48 << 20

// TestRelease builds the release the way `make release` does and checks what spore and HookOS
// receive: a static ELF for each arch, stamped with the version, built without cgo and with
// -trimpath, no forbidden module in it, no larger than maxReleaseSize, and SHA256SUMS that match.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fleetd for two architectures; run without -short")
	}
	const version = "v0.0.0-releasetest"
	dist := t.TempDir()
	cmd := exec.Command("./scripts/release.sh")
	cmd.Env = append(os.Environ(), "DIST="+dist, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatalf("read SHA256SUMS: %v", err)
	}
	var want []string
	for _, arch := range releaseArches {
		name := "fleetd-linux-" + arch
		path := filepath.Join(dist, name)
		checkStaticELF(t, path, arch)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		checkBuildInfo(t, path, b, arch, version)
		sum := sha256.Sum256(b)
		want = append(want, hex.EncodeToString(sum[:])+"  "+name)
		t.Logf("%s: %d bytes", name, len(b))
		if len(b) > maxReleaseSize {
			t.Errorf("%s is %.1f MiB, over %d MiB: something links far more code than fleetd needs "+
				"(go-netbox's generated APIClient alone made it 78.5 MiB: docs/operate.md, \"Memory\"); "+
				"find it with go build -ldflags=-dumpdep", name, float64(len(b))/(1<<20), maxReleaseSize>>20)
		}
		if arch == runtime.GOARCH && runtime.GOOS == "linux" {
			out, err := exec.Command(path, "version").Output()
			if err != nil || strings.TrimSpace(string(out)) != "fleetd "+version {
				t.Errorf("%s version = %q, %v; want \"fleetd %s\"", name, out, err, version)
			}
		}
	}
	if got := strings.TrimSpace(string(sums)); got != strings.Join(want, "\n") {
		t.Errorf("SHA256SUMS =\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// checkStaticELF fails unless path is a linux ELF for arch with no program interpreter and no
// shared library: it runs on spore and in a FROM scratch image as it is.
func checkStaticELF(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s as ELF: %v", path, err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}[arch]
	if f.Machine != machine || f.Class != elf.ELFCLASS64 {
		t.Errorf("%s: machine %v class %v, want %v 64-bit", path, f.Machine, f.Class, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is dynamically linked (cgo?)", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", path, libs)
	}
}

// checkBuildInfo reads the build settings the Go linker records in the binary.
func checkBuildInfo(t *testing.T, path string, b []byte, arch, version string) {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("read build info of %s: %v", path, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": arch} {
		if settings[k] != v {
			t.Errorf("%s: build setting %s = %q, want %q", path, k, settings[k], v)
		}
	}
	// With -trimpath Go records no -ldflags, so the stamp and the build id are read from the file.
	if !bytes.Contains(b, []byte(version)) {
		t.Errorf("%s does not hold the version %s (-X main.version)", path, version)
	}
	if out, err := exec.Command("go", "tool", "buildid", path).Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("%s has build id %q (%v), want none (scripts/release.sh links with -buildid=)", path, out, err)
	}
	if rev, ok := settings["vcs.revision"]; ok {
		t.Errorf("%s records vcs.revision %s: the build is not -buildvcs=false", path, rev)
	}
	var mods bytes.Buffer
	for _, m := range bi.Deps {
		fmt.Fprintln(&mods, m.Path)
	}
	if bad := forbiddenIn(strings.Fields(mods.String())); len(bad) > 0 {
		t.Errorf("%s links modules of the development stack:\n  %s", path, strings.Join(bad, "\n  "))
	}
}

package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFloor reads the resident pages of dev/rssfloor, built without -s -w (a test binary is
// stripped): its initialisation ran, so .text is resident, and fleetd's module (whose packages'
// initialisation ran) and the standard library have resident pages of it.
func TestFloor(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rssfloor")
	build := exec.Command("go", "build", "-o", bin, "../rssfloor") // as dev/stack builds it, sharing the build cache
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../rssfloor: %v\n%s", err, out)
	}
	floor := exec.Command(bin)
	stdout, err := floor.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := floor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killWait(t, floor) })
	// It prints its pid once its initialisation is done.
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("rssfloor printed no pid: %v", err)
	}
	r, err := resident(floor.Process.Pid, "")
	if err != nil {
		t.Fatal(err)
	}
	pages := func(cs []count, name string) int {
		if i := slices.IndexFunc(cs, func(c count) bool { return c.name == name }); i >= 0 {
			return cs[i].pages
		}
		return 0
	}
	if pages(r.sections, ".text") == 0 || pages(r.sections, ".gopclntab") == 0 {
		t.Errorf("no resident .text or .gopclntab: %+v", r.sections)
	}
	sum := 0
	for _, s := range r.sections {
		sum += s.pages
	}
	if sum > r.pages {
		t.Errorf("the sections hold %d resident pages, more than the %d mapped", sum, r.pages)
	}
	for _, m := range []string{"github.com/folly-infra/fleetd", "std"} {
		if pages(r.modules, m) == 0 {
			t.Errorf("no resident .text page of %s: %+v", m, r.modules)
		}
	}
	var out strings.Builder
	r.print(&out, 3)
	if !strings.Contains(out.String(), ".text by module:") || strings.Count(out.String(), "\n") > len(r.sections)+5 {
		t.Errorf("the report:\n%s", out.String())
	}
}

func TestRefusals(t *testing.T) {
	sleep := exec.Command("sleep", "60") // Debian's sleep is stripped
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killWait(t, sleep) })
	tests := []struct {
		name    string
		pid     int
		symbols string
		want    string
	}{
		{"refuse/stripped", sleep.Process.Pid, "", "has no symbols (a build with -s)"},
		{"refuse/stripped-test-binary", os.Getpid(), "", "has no symbols (a build with -s)"},
		{"refuse/another-binary", os.Getpid(), sleepPath(t), "is not laid out as process"},
		{"refuse/no-process", 1 << 30, "", "process 1073741824"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := resident(tc.pid, tc.symbols); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("resident: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func sleepPath(t *testing.T) string {
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestModuleOf(t *testing.T) {
	mods := []string{"github.com/netbox-community/go-netbox/v4", "github.com/folly-infra/fleetd", "k8s.io/api"}
	for name, want := range map[string]string{
		"github.com/netbox-community/go-netbox/v4.(*Device).UnmarshalJSON":       "github.com/netbox-community/go-netbox/v4",
		"type:.eq.github.com/netbox-community/go-netbox/v4.NullableString":       "github.com/netbox-community/go-netbox/v4",
		"github.com/folly-infra/fleetd/fleet.(*Service).decide.func1":            "github.com/folly-infra/fleetd",
		"slices.SortFunc[go.shape.[]github.com/folly-infra/fleetd/fleet.Device]": "std",
		"k8s.io/api/core/v1.init":                "k8s.io/api",
		"k8s.io/apimachinery/pkg/runtime.Decode": "std",
		"runtime.mallocgc":                       "std",
		"github.com/folly-infra/fleetdx.F":       "std",
	} {
		if got := moduleOf(name, mods); got != want {
			t.Errorf("moduleOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// killWait ends a process the test started and reaps it.
func killWait(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %s: %v", cmd.Path, err)
	}
	_ = cmd.Wait() // killed: its exit status says only that
}

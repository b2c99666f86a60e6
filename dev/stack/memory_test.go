package stack_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// idleRSS is fleetd's resident memory (VmRSS, KiB) once the test stack settled, before any
// test ran: measured by runWithStack, reported by TestFleetdIdleMemory.
var idleRSS int

// idleAnon and idleFile split idleRSS (RssAnon, RssFile, KiB): the heap, stacks and runtime, and
// the binary's own pages (docs/operate.md, "Memory").
var idleAnon, idleFile int

// measureIdleRSS waits until fleetd finished two periodic reconciles over the seeded
// inventory (it has listed NetBox, watched Workflows and written Kea reservations), then
// reads VmRSS from /proc/<pid>/status.
func measureIdleRSS(s *stack.Stack) (int, error) {
	end := time.Now().Add(2 * time.Minute)
	for {
		runs, err := scrape(s.Info().Fleetd.HTTPURL, "fleetd_reconcile_runs_total")
		if err == nil && runs >= 2 {
			break
		}
		if time.Now().After(end) {
			return 0, fmt.Errorf("measure fleetd's idle memory: fewer than 2 reconciles after 2 minutes (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var err error
	if idleAnon, err = statusKiB(s.FleetdPID(), "RssAnon"); err != nil {
		return 0, err
	}
	if idleFile, err = statusKiB(s.FleetdPID(), "RssFile"); err != nil {
		return 0, err
	}
	return vmRSS(s.FleetdPID())
}

// Bounds of fleetd's resident memory at rest as multiples of the floor's, measured in the same
// run (docs/operate.md, "Memory": 35 MiB against the floor's 26, 9 MiB anonymous against 6).
// fleetd's own work at rest is small beside its code's pages, so its whole VmRSS stays within
// twice the floor's; the heap is where a leak or an unbounded cache shows, so RssAnon has a bound
// of its own. The binary's pages move by a few MiB between runs (operate.md): both bounds leave
// room for that, and for no such leak.
const (
	maxRSSOverFloor  = 2.0
	maxAnonOverFloor = 3.0
)

// TestFleetdIdleMemory reports the resident memory of `fleetd serve` at rest with the seeded
// inventory (spore is a Raspberry Pi: the number goes into the issue notes) beside the floor of
// its code (dev/rssfloor: the packages fleetd links, initialised and left idle, built as the
// stack's fleetd is), and fails when fleetd's VmRSS or RssAnon is more than its bound times the
// floor's, or the floor could not be measured.
func TestFleetdIdleMemory(t *testing.T) {
	needStack(t)
	if idleRSS == 0 {
		t.Fatal("fleetd's idle memory was not measured")
	}
	floor, floorAnon, floorFile := floorRSS(t)
	t.Logf("fleetd serve idle VmRSS: %d KiB (%.1f MiB) with %d NetBox devices: RssAnon %.1f MiB (heap, stacks, runtime), RssFile %.1f MiB (the binary's pages); "+
		"the floor of its linked code (dev/rssfloor) %.1f MiB: RssAnon %.1f MiB, RssFile %.1f MiB",
		idleRSS, float64(idleRSS)/1024, len(testStack.Info().Devices), float64(idleAnon)/1024, float64(idleFile)/1024,
		float64(floor)/1024, float64(floorAnon)/1024, float64(floorFile)/1024)
	t.Logf("fleetd over its floor: VmRSS %.2f times (bound %g), RssAnon %.2f times (bound %g)",
		float64(idleRSS)/float64(floor), maxRSSOverFloor, float64(idleAnon)/float64(floorAnon), maxAnonOverFloor)
	if float64(idleRSS) > maxRSSOverFloor*float64(floor) {
		t.Errorf("fleetd serve is resident at %d KiB at rest, more than %g times the floor of its code (%d KiB)", idleRSS, maxRSSOverFloor, floor)
	}
	if float64(idleAnon) > maxAnonOverFloor*float64(floorAnon) {
		t.Errorf("fleetd serve holds %d KiB of anonymous memory at rest (heap, stacks, runtime), more than %g times the floor's (%d KiB)", idleAnon, maxAnonOverFloor, floorAnon)
	}
}

// floorRSS builds and starts dev/rssfloor, waits until its packages have initialised (it prints
// its pid after) and a second more, and reads its VmRSS, RssAnon and RssFile (KiB).
func floorRSS(t *testing.T) (rss, anon, file int) {
	t.Helper()
	root, err := stack.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "rssfloor")
	build := exec.Command("go", "build", "-o", bin, "./dev/rssfloor")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build dev/rssfloor: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("dev/rssfloor printed no pid: %v", err)
	}
	time.Sleep(time.Second)
	pid := cmd.Process.Pid
	for _, f := range []struct {
		key string
		v   *int
	}{{"VmRSS", &rss}, {"RssAnon", &anon}, {"RssFile", &file}} {
		if *f.v, err = statusKiB(pid, f.key); err != nil {
			t.Fatal(err)
		}
	}
	return rss, anon, file
}

func vmRSS(pid int) (int, error) { return statusKiB(pid, "VmRSS") }

// statusKiB reads one kB line of /proc/<pid>/status.
func statusKiB(pid int, key string) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read fleetd's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("read fleetd's memory: no %s in /proc/%d/status", key, pid)
}

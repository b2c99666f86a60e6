package stack_test

import (
	"bufio"
	"fmt"
	"os"
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

// TestFleetdIdleMemory reports the resident memory of `fleetd serve` at rest with the seeded
// inventory (spore is a Raspberry Pi: the number goes into the issue notes), and fails only if
// it is far beyond what such a service needs.
func TestFleetdIdleMemory(t *testing.T) {
	needStack(t)
	if idleRSS == 0 {
		t.Fatal("fleetd's idle memory was not measured")
	}
	t.Logf("fleetd serve idle VmRSS: %d KiB (%.1f MiB) with %d NetBox devices: RssAnon %.1f MiB (heap, stacks, runtime), RssFile %.1f MiB (the binary's pages)",
		idleRSS, float64(idleRSS)/1024, len(testStack.Info().Devices), float64(idleAnon)/1024, float64(idleFile)/1024)
	if idleRSS > 400*1024 {
		t.Errorf("fleetd serve uses %d KiB at rest, more than 400 MiB", idleRSS)
	}
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

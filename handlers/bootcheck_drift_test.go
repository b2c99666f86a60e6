package handlers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/fleet"
)

// swtpmMachine is a machine whose swtpm keeps its state (the AK's parent, the EK) across boots;
// each boot starts swtpm, which resets the PCRs, and replays that boot's event log.
type swtpmMachine struct {
	dir string
	ek  string
}

func newSwtpmMachine(t *testing.T) swtpmMachine {
	t.Helper()
	root := t.TempDir()
	tpm, err := swtpm.Manufacture(context.Background(), filepath.Join(root, "tpm"), swtpm.Options{CADir: filepath.Join(root, "ekca")})
	if err != nil {
		t.Fatal(err)
	}
	return swtpmMachine{dir: filepath.Join(root, "tpm"), ek: tpm.EKSHA256}
}

// boot starts the machine's swtpm with a boot measured by eventLog, and returns the TPM spec and
// the event log file as `fleetd boot-check --tpm --event-log` take them. stop ends the boot.
func (m swtpmMachine) boot(t *testing.T, eventLog []byte) (spec, logFile string, stop func()) {
	t.Helper()
	inst, err := swtpm.Start(context.Background(), m.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.ReplayEventLog(eventLog); err != nil {
		_ = inst.Stop()
		t.Fatal(err)
	}
	logFile = filepath.Join(t.TempDir(), "binary_bios_measurements")
	if err := os.WriteFile(logFile, eventLog, 0o644); err != nil {
		t.Fatal(err)
	}
	return inst.Spec(), logFile, func() { _ = inst.Stop() }
}

// TestBootCheckDrift changes a machine's boot between two checks, with swtpm so that the AK
// survives the reboot: the check after the change is recorded as drift with one journal entry
// naming the PCRs and events, a second drift writes none, and the baseline boot passes again
// (docs/design.md §5).
func TestBootCheckDrift(t *testing.T) {
	m := newSwtpmMachine(t)
	baseline, changed := eventlogs.Ubuntu2104NoSecureBoot, eventlogs.Ubuntu2104NoDBX

	spec, logFile, stop := m.boot(t, baseline)
	f, dir := enrollActive(t, catalog(fleet.SecureBootAny), m.ek, agent.EnrollConfig{TPM: spec, EventLog: logFile})
	stop()
	check := func(eventLog []byte) error {
		spec, logFile, stop := m.boot(t, eventLog)
		defer stop()
		return agent.BootCheck(context.Background(), agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: f.url, RetryWait: time.Millisecond},
			TPM: spec, EventLog: logFile, Dir: dir, Log: zerolog.Nop()})
	}
	journal := len(f.inv.JournalOf(12))
	newEntries := func() []string {
		j := f.inv.JournalOf(12)
		out := j[journal:]
		journal = len(j)
		return out
	}

	// ok/first check after the install takes the baseline.
	if err := check(baseline); err != nil {
		t.Fatalf("first check: exit %d: %v", agent.ExitCode(err), err)
	}
	taken := f.inv.Get(12)
	if j := newEntries(); len(j) != 1 || !strings.Contains(j[0], "baseline taken") || !strings.Contains(j[0], "Secure Boot disabled") {
		t.Fatalf("journal after the first check: %q", j)
	}

	// drift/the changed boot: recorded, exit 6, one warning naming the PCRs and events.
	err := check(changed)
	var drift *agent.DriftError
	if !errors.As(err, &drift) || agent.ExitCode(err) != agent.ExitDrift || len(drift.Changes) == 0 {
		t.Fatalf("check of the changed boot: exit %d: %v; want exit %d with the changes", agent.ExitCode(err), err, agent.ExitDrift)
	}
	d := f.inv.Get(12)
	if d.Owned.BootCheck != fleet.BootCheckDrift || d.Owned.BootBaseline != taken.Owned.BootBaseline || !d.Owned.LastBootCheck.After(taken.Owned.LastBootCheck) {
		t.Errorf("after drift: boot_check %q, baseline kept %v, last_boot_check moved %v",
			d.Owned.BootCheck, d.Owned.BootBaseline == taken.Owned.BootBaseline, d.Owned.LastBootCheck.After(taken.Owned.LastBootCheck))
	}
	j := newEntries()
	if len(j) != 1 || !strings.HasPrefix(j[0], "warning: Boot check of node-a: the boot differs from its baseline: PCR ") ||
		!strings.Contains(j[0], drift.Changes[0]) || !strings.Contains(j[0], "desired_action=attest") {
		t.Fatalf("journal after drift: %q; changes %q", j, drift.Changes)
	}
	t.Logf("drift journal entry: %s", j[0])

	// drift/the same changed boot again: recorded, no second entry.
	if err := check(changed); agent.ExitCode(err) != agent.ExitDrift {
		t.Fatalf("second check of the changed boot: exit %d: %v", agent.ExitCode(err), err)
	}
	if j := newEntries(); len(j) != 0 {
		t.Errorf("a second drift wrote %q", j)
	}

	// ok/back on the baseline boot: passes again, one entry.
	if err := check(baseline); err != nil {
		t.Fatalf("check of the baseline boot: exit %d: %v", agent.ExitCode(err), err)
	}
	if j := newEntries(); len(j) != 1 || !strings.HasPrefix(j[0], "success: Boot check of node-a passed again after drift") {
		t.Errorf("journal after the baseline boot: %q", j)
	}
	if n := counter(t, f, "fleetd_boot_checks_total", "drift"); n != 2 {
		t.Errorf("fleetd_boot_checks_total{outcome=drift} = %v, want 2", n)
	}
}

package attest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/dev/swtpm"
)

// The machines these tests attest are real TPMs: the go-tpm-tools simulator (the Microsoft
// reference TPM through cgo, a process-wide singleton, so no test here runs in parallel) and a
// swtpm manufactured once for the package with an EK certificate from a local EK CA. A recorded
// event log is replayed into the PCRs first, so quotes and logs verify as on a real machine.

var (
	swtpmDir   string // the package's manufactured swtpm
	swtpmCADir string // its EK CA
	swtpmEK    *swtpm.TPM
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "attest-swtpm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	swtpmDir, swtpmCADir = filepath.Join(dir, "tpm"), filepath.Join(dir, "ekca")
	if swtpmEK, err = swtpm.Manufacture(context.Background(), swtpmDir, swtpm.Options{CADir: swtpmCADir}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testTime = time.Now().UTC().Truncate(time.Second).Add(time.Minute)
	return m.Run()
}

// channel is a command channel with a fixed event log.
type channel struct {
	io.ReadWriteCloser
	log []byte
}

func (c channel) MeasurementLog() ([]byte, error) { return c.log, nil }

// machine is a TPM as the agent opens it, and its raw command channel for the tests' own commands.
type machine struct {
	*agent.TPM
	rw io.ReadWriter
}

// simMachine opens the simulator, freshly manufactured, with log replayed into its PCRs.
func simMachine(t testing.TB, log []byte) *machine {
	t.Helper()
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	if err := swtpm.ReplayEventLog(sim, log); err != nil {
		_ = sim.Close()
		t.Fatal(err)
	}
	return openMachine(t, channel{sim, log})
}

// swtpmMachine starts the package's swtpm (a fresh boot) with log replayed into its PCRs.
func swtpmMachine(t testing.TB, log []byte) *machine {
	t.Helper()
	inst, err := swtpm.Start(context.Background(), swtpmDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop() })
	if err := inst.ReplayEventLog(log); err != nil {
		t.Fatal(err)
	}
	rw, err := inst.Open()
	if err != nil {
		t.Fatal(err)
	}
	return openMachine(t, channel{rw, log})
}

func openMachine(t testing.TB, ch channel) *machine {
	t.Helper()
	m, err := agent.OpenTPM(ch)
	if err != nil {
		_ = ch.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &machine{TPM: m, rw: ch}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testTime is the tests' fixed clock. It is set in TestMain after the package's swtpm is
// manufactured, a minute after the real time: swtpm_localca issues the EK certificate valid from
// the moment it runs, so a clock fixed at any earlier date would find it not yet valid.
var testTime time.Time

func seeded(seed byte) *mrand.ChaCha8 { return mrand.NewChaCha8([32]byte{seed}) }

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

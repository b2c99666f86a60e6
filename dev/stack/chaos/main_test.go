package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/stack/chaos"
)

// The chaos tests share one development stack per test binary: the real `fleetd serve` (built
// here), the NetBox emulator, the Kubernetes API server and the pool's swtpm machines. With
// -short no stack is started and the tests that need one skip.

var (
	seedFlag      = flag.Int64("seed", 0, "play the schedule of this seed (with -schedules N: this seed and the N-1 after it); 0 draws a base seed from the clock")
	schedulesFlag = flag.Int("schedules", 0, "how many schedules TestChaos plays (default 5, or 1 with -seed)")
	instancesFlag = flag.Int("fleetd-instances", 2, "how many fleetd instances the chaos stack runs behind its front (its SIGKILLs take turns)")
	coveringFlag  = flag.Bool("covering", false, "play the covering seeds from -seed (chaos.CoveringSeeds: every step, fault and kill point drawn) and fail unless each happened")
)

// The covering run (make test) picks its seeds among coverCandidates from -seed on, so that each
// coverage key is drawn coverTimes times: twice, so that one draw that finds nothing to act on (a
// kill point whose netboot had no Workflow) does not leave the key uncovered.
const (
	coverCandidates = 1000
	coverTimes      = 2
)

// pool is the chaos stack's own machines (Options.MoreDevices): one of each class kind, and one
// of each way a machine must be refused.
var pool = []stack.SeedDevice{
	{Name: "chaos-talos", Class: "talos-worker"},
	{Name: "chaos-nixos", Class: "nixos-builder"},
	{Name: "chaos-alpine", Class: "alpine-edge"},
	{Name: "chaos-nocloud", Class: "ubuntu-lab"},
	{Name: "chaos-foreign-ek", Class: "talos-worker", ForeignEK: true},
	{Name: "chaos-two-disks", Class: "talos-worker", DuplicateDisk: true},
	{Name: "chaos-no-ek", Class: "talos-worker", NoEK: true},
}

// certLifetime is the chaos stack's LDevID and LAK lifetime, renewed from half of it: short, so
// that a node the schedule checks again is renewed during the run (Runner.renew waits at most a
// minute for the renewal point), and long enough that a node checking once per half-life keeps
// certificates within their lifetime.
const certLifetime = 2 * time.Minute

// netboxTimeout is fleetd's netbox.timeout in the chaos stack: short, so that a "timeout" fault
// costs seconds, not tens of seconds.
const netboxTimeout = 2 * time.Second

var testStack *stack.Stack

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(klog.Background())
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runWithStack(m))
}

func runWithStack(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "chaos-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos tests:", err)
		return 1
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(tmp)
		}
	}()
	bin, err := stack.BuildFleetd(".", tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos tests:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	testStack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(tmp, "state"), FleetdBinary: bin,
		MoreDevices: append(slices.Clone(pool), twoInstanceDevices...), FleetdInstances: *instancesFlag, ReconcileInterval: 5 * time.Second, NetBoxTimeout: netboxTimeout, CertLifetime: certLifetime, LogLevel: "debug",
		Logger: zerolog.New(logw).Level(zerolog.ErrorLevel).With().Timestamp().Logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos tests: start the stack:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		keep = true
		fmt.Fprintf(os.Stderr, "chaos tests failed; the stack's state is kept in %s (fleetd's log: %s)\n", tmp, testStack.Info().Fleetd.Log)
	}
	if err := testStack.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos tests: stop the stack:", err)
	}
	return code
}

func needStack(t testing.TB) *stack.Stack {
	t.Helper()
	if testStack == nil {
		t.Skip("needs the development stack (not started with -short)")
	}
	return testStack
}

// poolConfig is Generate's configuration for the chaos stack's pool.
func poolConfig() chaos.Config {
	roles := map[string]chaos.Role{"chaos-foreign-ek": chaos.RoleRefused, "chaos-two-disks": chaos.RoleRefused, "chaos-no-ek": chaos.RoleRejected}
	cfg := chaos.Config{Machines: 3, NetBoxTimeout: netboxTimeout}
	for _, d := range pool {
		cfg.Pool = append(cfg.Pool, chaos.PoolMachine{Name: d.Name, Role: roles[d.Name]})
	}
	return cfg
}

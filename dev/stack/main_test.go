package stack_test

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
)

// The end-to-end tests share one stack per test binary: the real `fleetd serve` (built once
// here), the NetBox emulator, the Kubernetes API server and the machines' swtpm TPMs. Each test
// acts on devices no other test touches, through NetBox's REST API as the owner and fleetd's
// HTTP API as an operator. With -short no stack is started and these tests skip.

// extraDevices are the generated devices the tests below use, besides the example inventory.
const extraDevices = 16

// testReconcileInterval is fleetd's periodic reconcile in the test stack: fleetd's minimum, so
// that recoveries that wait for it (NetBox back, Kubernetes back) take seconds.
const testReconcileInterval = 5 * time.Second

var testStack *stack.Stack

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(klog.Background()) // controller-runtime's clients log through klog
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runWithStack(m))
}

func runWithStack(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "stack-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack tests:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, err := stack.BuildFleetd(".", tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack tests:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	testStack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(tmp, "state"), FleetdBinary: bin,
		ExtraDevices: extraDevices, MoreDevices: slices.Concat(lifecycleDevices, inventoryDevices), ReconcileInterval: testReconcileInterval,
		InventoryBootCheckWindow: inventoryWindow, LogLevel: "debug",
		Logger: zerolog.New(logw).Level(zerolog.WarnLevel).With().Timestamp().Logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack tests: start the stack:", err)
		return 1
	}
	if idleRSS, err = measureIdleRSS(testStack); err != nil {
		fmt.Fprintln(os.Stderr, "stack tests:", err)
	}
	code := m.Run()
	if err := checkWholeLog(testStack.Info()); err != nil {
		fmt.Fprintln(os.Stderr, "stack tests: the run's log:", err)
		code = 1
	}
	if err := checkQuamina(testStack.Info()); err != nil {
		fmt.Fprintln(os.Stderr, "stack tests:", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "stack tests failed; fleetd's log (last lines of %s):\n%s\n",
			testStack.Info().Fleetd.Log, tail(testStack.Info().Fleetd.Log, 40))
	}
	if err := testStack.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stack tests: stop the stack:", err)
	}
	return code
}

// needStack skips a test when no stack runs (-short).
func needStack(t testing.TB) *stack.Stack {
	t.Helper()
	if testStack == nil {
		t.Skip("needs the development stack (not started with -short)")
	}
	return testStack
}

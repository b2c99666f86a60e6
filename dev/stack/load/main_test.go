// Package load_test is fleetd's load test on the development stack (docs/performance.md, "Load"): 1,000 declared
// devices with simulated machines, webhook storms of 500 provision requests, the enrollment of
// every machine, and boot checks from 1,000 nodes, with latencies, fleetd's memory and a check
// that nothing was dropped. It is heavy (tens of minutes on two cores), so it runs only when
// FLEETD_LOAD is set: `make load` (LOAD_DEVICES scales it).
package load_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/folly-infra/fleetd/dev/stack"
)

var (
	testStack *stack.Stack
	devices   int           // LOAD_DEVICES, default 1000
	latency   time.Duration // LOAD_NETBOX_LATENCY (e.g. 25ms): the emulator's added latency, default 0
	startTook time.Duration // how long the stack took to start
	// stormsOnly (LOAD_PHASES=storms) stops after the two storms, checking that each request has
	// its one Workflow: the storms' figures in minutes instead of the install's tens.
	stormsOnly bool
)

func TestMain(m *testing.M) {
	if os.Getenv("FLEETD_LOAD") == "" {
		fmt.Println("load tests skipped: set FLEETD_LOAD=1 (make load)")
		os.Exit(m.Run())
	}
	ctrllog.SetLogger(klog.Background())
	devices = 1000
	if v, err := strconv.Atoi(os.Getenv("LOAD_DEVICES")); err == nil && v > 0 {
		devices = v
	}
	if v := os.Getenv("LOAD_NETBOX_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "load test: LOAD_NETBOX_LATENCY=%q is not a duration such as 25ms\n", v)
			os.Exit(2)
		}
		latency = d
	}
	switch v := os.Getenv("LOAD_MODE"); v {
	case "", "lifecycle":
	case "steady":
		steady = &steadyConfig{pool: 32, instances: 1, minutes: 15 * time.Minute}
		for _, e := range []struct {
			env string
			v   *int
		}{{"LOAD_POOL", &steady.pool}, {"LOAD_INSTANCES", &steady.instances}} {
			if s := os.Getenv(e.env); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 {
					fmt.Fprintf(os.Stderr, "load test: %s=%q is not a positive number\n", e.env, s)
					os.Exit(2)
				}
				*e.v = n
			}
		}
		if v := os.Getenv("LOAD_STEADY_MINUTES"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "load test: LOAD_STEADY_MINUTES=%q is not a positive number of minutes\n", v)
				os.Exit(2)
			}
			steady.minutes = time.Duration(n) * time.Minute
		}
	default:
		fmt.Fprintf(os.Stderr, "load test: LOAD_MODE=%q is not lifecycle or steady\n", v)
		os.Exit(2)
	}
	switch v := os.Getenv("LOAD_PHASES"); v {
	case "", "all":
	case "storms":
		stormsOnly = true
	default:
		fmt.Fprintf(os.Stderr, "load test: LOAD_PHASES=%q is not all or storms\n", v)
		os.Exit(2)
	}
	os.Exit(runWithStack(m))
}

func runWithStack(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "load-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "load test:", err)
		return 1
	}
	if os.Getenv("LOAD_KEEP") == "" {
		defer os.RemoveAll(tmp)
	} else {
		defer fmt.Fprintf(os.Stderr, "load test: LOAD_KEEP is set: the stack's state (fleetd's log, stack.json) stays in %s\n", tmp)
	}
	bin, err := stack.BuildFleetd(".", tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load test:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	logw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	opts := stack.Options{Dir: filepath.Join(tmp, "state"), FleetdBinary: bin,
		ExtraDevices: devices, NetBoxLatency: latency, Logger: zerolog.New(logw).Level(zerolog.ErrorLevel).With().Timestamp().Logger()}
	if steady != nil {
		opts = steadyOptions(opts)
	}
	testStack, err = stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load test: start the stack:", err)
		return 1
	}
	startTook = time.Since(start)
	code := m.Run()
	if err := testStack.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "load test: stop the stack:", err)
	}
	return code
}

func needStack(t *testing.T) *stack.Stack {
	t.Helper()
	if testStack == nil {
		t.Skip("set FLEETD_LOAD=1 to run the load test (make load)")
	}
	return testStack
}

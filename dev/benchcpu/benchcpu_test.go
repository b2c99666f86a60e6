package benchcpu_test

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/folly-infra/fleetd/dev/benchcpu"
)

// measure runs a benchmark of n iterations, whatever -benchtime the test binary was given (make
// test gives 1x), each doing work, after setup before Start; it returns the cpu-ns/op Start
// reported.
//
// An iteration takes tens of milliseconds of CPU: the kernel's count of a process's CPU time can
// lag by a scheduler tick (up to 4 ms) for each of its other threads, and over a short iteration
// that lag alone is many times the work (174 µs of CPU over a 40 µs iteration, in CI).
func measure(t *testing.T, n int, setup, work func()) float64 {
	t.Helper()
	bt := flag.Lookup("test.benchtime")
	was := bt.Value.String()
	if err := bt.Value.Set(fmt.Sprintf("%dx", n)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bt.Value.Set(was) }()
	r := testing.Benchmark(func(b *testing.B) {
		setup()
		defer benchcpu.Start(b)()
		for b.Loop() {
			work()
		}
	})
	cpu, ok := r.Extra[benchcpu.Metric]
	if !ok || cpu <= 0 || r.N != n {
		t.Fatalf("%d iterations, %s %v; want %d and the metric above 0", r.N, benchcpu.Metric, r.Extra, n)
	}
	return cpu
}

// hash hashes mib MiB: CPU time in the process (user time).
func hash(mib int) func() {
	buf := make([]byte, 1<<16)
	return func() {
		for range mib * 16 {
			sha256.Sum256(buf)
		}
	}
}

// readZero reads mib MiB of /dev/zero 4 KiB at a time: CPU time in the kernel (system time).
func readZero(t *testing.T, mib int) func() {
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	buf := make([]byte, 4096)
	return func() {
		for range mib * 256 {
			if _, err := io.ReadFull(f, buf); err != nil {
				t.Error(err)
				return
			}
		}
	}
}

// TestStart: the CPU time a benchmark reports per iteration is its loop's, per iteration, user
// and system time both. Each bound is a ratio to a baseline measured in this run, so that a slow
// or loaded machine moves both sides: half as many iterations of twice the work report about
// twice the CPU time per iteration (a total over the iterations would report the same, the wall
// time of a loaded machine anything); a set-up of as much work as the whole loop, before Start,
// adds about nothing; and the same holds for work done in the kernel.
func TestStart(t *testing.T) {
	nothing := func() {}
	base := measure(t, 4, nothing, hash(32))
	twice := measure(t, 2, nothing, hash(64)) / base
	setup := measure(t, 4, hash(128), hash(32)) / base
	sysBase := measure(t, 4, nothing, readZero(t, 256))
	sysTwice := measure(t, 2, nothing, readZero(t, 512)) / sysBase
	t.Logf("hashing: %.1f ms of CPU per iteration; twice the work %.2f times it; with the set-up %.2f times it. Reading /dev/zero: %.1f ms; twice %.2f times it",
		base/1e6, twice, setup, sysBase/1e6, sysTwice)
	for _, r := range []struct {
		what     string
		got, min float64
		max      float64
	}{
		{"an iteration of twice the work", twice, 1.5, 2.5},
		{"a set-up of the whole loop's work before Start (not counted)", setup, 0.75, 1.33},
		{"an iteration of twice the work in the kernel", sysTwice, 1.5, 2.5},
	} {
		if r.got < r.min || r.got > r.max {
			t.Errorf("%s reports %.2f times the CPU time per iteration of its baseline, want %.2f to %.2f", r.what, r.got, r.min, r.max)
		}
	}
}

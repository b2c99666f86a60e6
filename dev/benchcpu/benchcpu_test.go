package benchcpu_test

import (
	"crypto/sha256"
	"testing"

	"github.com/folly-infra/fleetd/dev/benchcpu"
)

// TestStart: a benchmark that hashes reports its CPU time per iteration, more than nothing and
// not more than four times its wall time (a single-threaded loop spends about one core's).
//
// Each iteration hashes 32 MiB (tens of milliseconds): make test runs with -benchtime 1x, so the
// benchmark may run a single iteration, and the kernel's count of a process's CPU time can lag by
// a scheduler tick (up to 4 ms) for each of its other threads; over one short iteration that lag
// alone passed the bound (174 µs of CPU over a 40 µs iteration of 64 KiB, in CI).
func TestStart(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) {
		buf := make([]byte, 1<<16)
		defer benchcpu.Start(b)()
		for b.Loop() {
			for range 512 {
				sha256.Sum256(buf)
			}
		}
	})
	cpu, ok := r.Extra[benchcpu.Metric]
	if !ok || cpu <= 0 {
		t.Fatalf("no %s reported: %v", benchcpu.Metric, r.Extra)
	}
	if wall := float64(r.T.Nanoseconds()) / float64(r.N); cpu > 4*wall {
		t.Errorf("%s = %.0f, more than four times the wall time per iteration (%.0f ns)", benchcpu.Metric, cpu, wall)
	}
}

package benchcpu_test

import (
	"crypto/sha256"
	"testing"

	"github.com/folly-infra/fleetd/dev/benchcpu"
)

// TestStart: a benchmark that hashes reports its CPU time per iteration, more than nothing and
// not more than four times its wall time (a single-threaded loop spends about one core's).
func TestStart(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) {
		buf := make([]byte, 1<<16)
		defer benchcpu.Start(b)()
		for b.Loop() {
			sha256.Sum256(buf)
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

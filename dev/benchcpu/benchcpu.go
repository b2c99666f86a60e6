// Package benchcpu reports a benchmark's CPU time per iteration beside its wall time. On a
// shared machine the wall time of an iteration moves with the load of everything else; the CPU
// time the benchmark's own process spent (every thread: the garbage collector's work too) moves
// far less, so the ratio of two benchmarks' CPU times is the figure to read when their wall
// times disagree (docs/performance.md).
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// Metric is the unit Start reports.
const Metric = "cpu-ns/op"

// Start begins counting; the function it returns, called after the benchmark's loop, reports the
// process's CPU time (user and system) per iteration as cpu-ns/op. Call Start right before the
// loop, so that the set-up is not counted.
func Start(b *testing.B) (stop func()) {
	b.Helper()
	start := Used(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(Used(b)-start)/float64(b.N), Metric)
		}
	}
}

// Used is the CPU time (user and system) the process has spent so far, for a benchmark that
// counts only part of each iteration.
func Used(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("read the process's CPU time: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

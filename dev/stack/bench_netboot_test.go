package stack_test

import (
	"io"
	"slices"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// BenchmarkNetboot is `fleetsim machine NAME netboot` end to end on a swtpm: the
// swtpm started and its PCRs replayed from the recorded boot, the real `fleetd enroll` (both
// round trips to the real fleetd over TLS, an AK and an LDevID made in the swtpm), the Template's
// other actions simulated, every action's state reported to the Kubernetes API, the swtpm stopped.
// Each iteration provisions the machine again (untimed) and boots it after (untimed).
func BenchmarkNetboot(b *testing.B) {
	needStack(b)
	const name = "bench-netboot"
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		ask(b, name, "provision")
		accepted(b, name)
		b.StartTimer()
		start := time.Now()
		if err := stack.Netboot(tctx(b), testStack.Info(), name, stack.StepOptions{Out: io.Discard}); err != nil {
			b.Fatalf("netboot: %v", err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		waitState(b, name, "configuring")
		if err := stack.Boot(tctx(b), testStack.Info(), name, stack.StepOptions{Out: io.Discard}); err != nil {
			b.Fatalf("boot: %v", err)
		}
		waitState(b, name, "active")
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}

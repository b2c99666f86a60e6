package stack_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/benchcpu"
)

// The provision storm of docs/performance.md, "Load": 500 requests at once, NetBox at a real NetBox's pace.
const (
	stormDevices = 500
	stormWorkers = 16 // netbox.webhook_workers' default
	stormLatency = 25 * time.Millisecond
)

// BenchmarkProvisionStorm is the decision side of the provision storm in one process: 500
// devices whose owner asked for a provision at once are decided by 16 workers, as fleetd's
// webhook workers decide the queued webhooks (fleet.Requests.Reconcile: the device read, the
// change log, the claim, the journal entry, the Hardware and the Workflow), against a NetBox
// emulator that answers each request after 25 ms and the stack's Kubernetes API, with fleetd's
// own Kubernetes client limits. It reports the p50 and p99 of the time from the storm's start to
// each decision, the decisions per second and the process's CPU time per decision (the NetBox
// emulator's and the API server's included: they run in this process; the set-up is not). `make load` measures the storm
// through the whole stack; this one is for a CPU profile of the decisions:
//
//	go test ./dev/stack -run '^$' -bench ProvisionStorm -benchtime 1x -cpuprofile storm.pprof
func BenchmarkProvisionStorm(b *testing.B) {
	s := needStack(b)
	var lat []time.Duration
	var decided int
	var cpu time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		svc, ids := reconcileService(b, s, benchFleet{ns: fmt.Sprintf("bench-storm-%d-%d", os.Getpid(), i), devices: stormDevices,
			asked: "provision", latency: stormLatency})
		b.StartTimer()
		start, used := time.Now(), benchcpu.Used(b)
		work := make(chan int64)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range stormWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					out, err := svc.Requests.Reconcile(context.Background(), id)
					if err != nil || out.Result != "accepted" {
						b.Errorf("device %d: %s, %v; want accepted", id, out.Result, err)
					}
					mu.Lock()
					lat, decided = append(lat, time.Since(start)), decided+1
					mu.Unlock()
				}
			}()
		}
		for _, id := range ids {
			work <- id
		}
		close(work)
		wg.Wait()
		cpu += benchcpu.Used(b) - used
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(decided)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(decided), "cpu-ms/decision")
}

package stack_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// benchDevices numbers the devices the benchmarks add, so their names and addresses never clash.
var benchDevices atomic.Int64

// benchDevice adds a validly declared talos-worker device to an emulator (seeding, as OpenTofu
// would: no webhook) and returns its name and id; extra, when set, adds custom fields for the
// device's name. It has no simulated machine: nothing attests, and its ek_sha256 is random.
func benchDevice(tb testing.TB, emu *netboxemu.Emulator, extra func(name string) map[string]any) (string, int64) {
	tb.Helper()
	n := benchDevices.Add(1)
	ek := make([]byte, 32)
	if _, err := rand.Read(ek); err != nil {
		tb.Fatal(err)
	}
	name := fmt.Sprintf("bench-%05d", n)
	fields := map[string]any{"fleet_class": "talos-worker", "disk_serial": fmt.Sprintf("BENCH%05dDISK", n),
		"ek_sha256": hex.EncodeToString(ek)}
	if extra != nil {
		for k, v := range extra(name) {
			fields[k] = v
		}
	}
	id, err := emu.AddDevice(netboxemu.DeviceSpec{Name: name, PrimaryIPv4: fmt.Sprintf("127.%d.%d.%d/8", 100+n>>16, n>>8&0xff, n&0xff),
		Interfaces:   []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{fmt.Sprintf("02:f6:00:%02x:%02x:%02x", n>>16&0xff, n>>8&0xff, n&0xff)}}},
		CustomFields: fields})
	if err != nil {
		tb.Fatalf("add %s: %v", name, err)
	}
	return name, id
}

// BenchmarkWebhookToWorkflow measures, on the running stack, the time from the owner's PATCH of
// desired_action=provision (NetBox queues the webhook before it answers) to the Workflow's
// creation seen by a watch on the Kubernetes API: NetBox's delivery, fleetd's signature check,
// re-read, claim (a conditional NetBox write) and the Hardware and Workflow writes.
// It reports the median and the 99th percentile of the run.
func BenchmarkWebhookToWorkflow(b *testing.B) {
	s := needStack(b)
	created := watchWorkflowCreations(b, s)
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		_, id := benchDevice(b, s.NetBox(), nil)
		b.StartTimer()
		start := time.Now()
		if _, err := s.Owner().Patch(tctx(b), id, desired("provision")); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, waitCreated(b, created, id).Sub(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

// watchWorkflowCreations reports the device id and arrival time of every Workflow fleetd creates.
func watchWorkflowCreations(b *testing.B, s *stack.Stack) <-chan created {
	w, err := s.Kube().Watch(tctx(b), &tinkerbell.WorkflowList{}, client.InNamespace(s.Info().Namespace),
		client.HasLabels{workflows.LabelDeviceID})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	out := make(chan created, 1024)
	go func() {
		for ev := range w.ResultChan() {
			if wf, ok := ev.Object.(*tinkerbell.Workflow); ok && ev.Type == watch.Added {
				id, _ := strconv.ParseInt(wf.Labels[workflows.LabelDeviceID], 10, 64)
				out <- created{id: id, at: time.Now()}
			}
		}
	}()
	return out
}

type created struct {
	id int64
	at time.Time
}

func waitCreated(b *testing.B, ch <-chan created, id int64) time.Time {
	timeout := time.After(deadline)
	for {
		select {
		case c := <-ch:
			if c.id == id {
				return c.at
			}
		case <-timeout:
			b.Fatalf("no Workflow for device %d after %s", id, deadline)
		}
	}
}

// BenchmarkReconcile1000 measures one full periodic reconcile (fleet.Requests.ReconcileAll, what
// fleetd runs every reconcile.interval) over 1,000 declared devices, in-process against a NetBox
// emulator of its own and the stack's Kubernetes API. In-process, because one run is timed
// exactly; fleetd's metrics count runs (fleetd_reconcile_runs_total) but do not time them.
//   - idle: no device has a request (the common case): one paginated listing, nothing else.
//   - 1000-pending: every device has a claimed request whose Workflow has not started, so each
//     is re-read from NetBox, and every Workflow is read from Kubernetes in one listing (the
//     worst steady state).
//   - 1000-pending-one-read-each: the same with an installer that cannot list (fleetd before
//     fleet.WorkflowLister): one Kubernetes read per running request, at the client's 50/s.
func BenchmarkReconcile1000(b *testing.B) {
	s := needStack(b)
	b.Run("idle", func(b *testing.B) {
		svc, _ := reconcileService(b, s, benchFleet{ns: "bench-idle", devices: 1000})
		for b.Loop() {
			if _, err := svc.Requests.ReconcileAll(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1000-pending", func(b *testing.B) {
		svc, _ := reconcileService(b, s, benchFleet{ns: "bench-pending", devices: 1000, pending: true})
		for b.Loop() {
			if _, err := svc.Requests.ReconcileAll(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1000-pending-one-read-each", func(b *testing.B) {
		svc, _ := reconcileService(b, s, benchFleet{ns: "bench-pending-each", devices: 1000, pending: true, wrap: withoutListing})
		for b.Loop() {
			if _, err := svc.Requests.ReconcileAll(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// classesFile is examples/classes.json of the checkout.
func classesFile(tb testing.TB) *os.File {
	tb.Helper()
	root, err := stack.FindRoot(".")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "examples", "classes.json"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

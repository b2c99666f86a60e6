package handlers_test

import (
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// BenchmarkConfigFetch is the latency of one configuration delivery over HTTP on loopback: the
// route, the device found by its address, the configuration rendered from its NetBox fields and
// validated (a Talos worker config), and the conditional write of its delivery, on an in-memory
// NetBox (so NetBox's own latency is not counted). inventory-calls/op is the fleet.NetBox
// calls one delivery makes; docs/operate.md turns them into NetBox HTTP requests.
func BenchmarkConfigFetch(b *testing.B) {
	d := fleettest.Declared(12, "node-a")
	d.Address = netip.MustParsePrefix("127.0.0.1/8")
	f := handlerstest.New(b, handlerstest.Config{Devices: []fleet.Device{d}})
	client := &http.Client{}
	url := f.URL + "/v1/config/talos?uuid=" + machineUUID
	var calls int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-k3f9x2mq", Workflow: "w"}
		d.Status = fleet.StatusStaged
		f.Inv.Set(fleettest.Attested(d, machineUUID, time.Now(), time.Hour))
		before := f.Inv.Calls.Load()
		b.StartTimer()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 1000 {
			b.Fatalf("fetch %d: %d, %d bytes", i, resp.StatusCode, n)
		}
		calls += f.Inv.Calls.Load() - before
	}
	b.ReportMetric(float64(calls)/float64(b.N), "inventory-calls/op")
}

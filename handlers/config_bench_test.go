package handlers_test

import (
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// BenchmarkConfigFetch is the latency of one configuration delivery over HTTP on loopback: the
// route, the UUID and address checks, the one-time take, and recording the delivery in NetBox
// (in memory here, so NetBox's own latency is not counted).
func BenchmarkConfigFetch(b *testing.B) {
	d := fleettest.Declared(12, "node-a")
	d.Address = netip.MustParsePrefix("127.0.0.1/8")
	f := handlerstest.New(b, handlerstest.Config{Devices: []fleet.Device{d}})
	body := make([]byte, 7000) // a Talos worker config is about 7 KB
	client := &http.Client{}
	url := f.URL + "/v1/config/talos?uuid=" + machineUUID
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-k3f9x2mq", Workflow: "w"}
		d.Status = fleet.StatusStaged
		f.Inv.Set(d)
		if _, err := f.Pending.Put(12, fleet.PendingEntry{Device: "node-a", AttestedUUID: machineUUID, Address: d.IP(),
			Config: fleet.NodeConfig{Kind: fleet.KindTalos, ContentType: fleet.ContentTypeTalos, Body: body, Summary: "Talos worker config"}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n != int64(len(body)) {
			b.Fatalf("fetch %d: %d, %d bytes", i, resp.StatusCode, n)
		}
	}
}

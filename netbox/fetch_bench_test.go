package netbox_test

import (
	"context"
	"math/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/render"
)

// BenchmarkConfigFetchNetBox is one configuration fetch as fleetd serves it, through this adapter
// against the development stack's NetBox emulator: the device found at its address (the address
// index, filled by the one listing of the first fetch), read with its ETag (the device and its
// interfaces with their MACs, and beside them its change log for the trust check), the Talos worker configuration rendered and validated, the delivery's
// conditional write and its journal entry. netbox-requests/op is the HTTP requests one fetch
// sends to NetBox (docs/operate.md's NetBox budget); the emulator answers on loopback without
// latency, so a real NetBox adds its own time to each.
func BenchmarkConfigFetchNetBox(b *testing.B) {
	e := newEnv(b, 1)
	ctx := context.Background()
	id := e.node1 + 1 // gen0000, a talos-worker at 10.1.0.1/16
	sec, err := render.GenerateTalosSecrets(fleet.SystemClock{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := render.New(render.Config{TalosSecrets: sec, TalosVersion: "v1.11", ClusterName: "folly",
		ClusterEndpoint: "https://10.0.0.2:6443", DNS: []netip.Addr{netip.MustParseAddr("10.1.0.254")},
		Gateway: netip.MustParseAddr("10.1.0.254"), Clock: fleet.SystemClock{}, Random: rand.New(rand.NewSource(2))})
	if err != nil {
		b.Fatal(err)
	}
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: "fleetd"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: e.client, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Renderer: r,
			Clock: fleet.SystemClock{}, Random: rand.New(rand.NewSource(1))})
	if err != nil {
		b.Fatal(err)
	}
	const uuid = "4c4c4544-0042-3510-8052-b4c04f4e3232"
	fetch := fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: uuid, RemoteAddr: netip.MustParseAddr("10.1.0.1")}
	keys := fleettest.SealKeys()
	attest := func() { // what the provision's attestation records, sealed as fleetd seals it
		req, state := "provision-k3f9x2mq", fleet.StateConfiguring
		ident := fleettest.Attested(fleet.Device{Owned: fleet.Owned{Request: req}}, uuid, time.Now(), time.Hour).Owned.Identity
		d, err := e.client.Device(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		p := fleet.Patch{Status: fleet.StatusStaged, State: &state, Request: &req, Identity: &ident}
		p.ApplyOwned(&d.Owned)
		p.Seal = keys.Seal(id, d.Owned, time.Now())
		if _, err := e.client.Update(ctx, id, p); err != nil {
			b.Fatal(err)
		}
	}
	attest()
	if _, _, err := s.Delivery.FetchConfig(ctx, fetch); err != nil { // the first fetch also lists, once
		b.Fatal(err)
	}
	var requests int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		attest()
		before := e.attempts.n.Load()
		b.StartTimer()
		nc, _, err := s.Delivery.FetchConfig(ctx, fetch)
		if err != nil || len(nc.Body) < 1000 {
			b.Fatalf("fetch %d: %v (%d bytes)", i, err, len(nc.Body))
		}
		requests += e.attempts.n.Load() - before
	}
	b.ReportMetric(float64(requests)/float64(b.N), "netbox-requests/op")
}

package fleet_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestFetchFromUnknownAddressCostsNetBoxNothing: configuration fetches are unauthenticated, so a
// fetch from an address no device has is answered from the address index without a NetBox
// request; only the first fetch of a fleetd that has not listed the devices yet lists them,
// once (docs/security.md, "A hostile host on the lab network").
func TestFetchFromUnknownAddressCostsNetBoxNothing(t *testing.T) {
	var devices []fleet.Device
	for i := 1; i <= 200; i++ {
		d := fleettest.Declared(int64(i), fmt.Sprintf("node-%03d", i))
		d.Address = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 16)
		devices = append(devices, d)
	}
	inv := fleettest.NewNetBox(devices...)
	s := newTestService(inv, fleettest.NewInstaller())
	fetch := func(addr string) string {
		_, _, err := s.Delivery.FetchConfig(context.Background(), fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr(addr)})
		if r, ok := fleet.AsRefusal(err); ok {
			return r.Code
		}
		return fmt.Sprint(err)
	}
	before := inv.Calls.Load()
	if code := fetch("10.9.9.9"); code != "unknown_address" {
		t.Fatalf("first fetch from an unknown address: %s, want unknown_address", code)
	}
	if n := inv.Calls.Load() - before; n != 1 {
		t.Errorf("the first fetch of a fleetd that never listed the devices made %d NetBox calls, want the one listing", n)
	}
	before = inv.Calls.Load()
	for i := 0; i < 100; i++ {
		if code := fetch(fmt.Sprintf("10.9.9.%d", i)); code != "unknown_address" {
			t.Fatalf("fetch %d: %s, want unknown_address", i, code)
		}
	}
	if n := inv.Calls.Load() - before; n != 0 {
		t.Errorf("refuse/100 fetches from unknown addresses made %d NetBox calls, want 0", n)
	}
	before = inv.Calls.Load()
	if code := fetch("10.0.0.7"); code != "no_pending_config" {
		t.Fatalf("fetch from node-007's address: %s, want no_pending_config", code)
	}
	if n := inv.Calls.Load() - before; n != 2 {
		t.Errorf("a fetch from a device's address made %d NetBox calls, want the one device read and its change log beside it", n)
	}
}

// TestAddressIndexFollowsNetBox: the index is a cache of NetBox, confirmed by the device read a
// hit makes. A device that moved is not served at its old address, and is found at its new one
// once fleetd reads it (a Workflow event, a webhook, the reconcile) — on each instance, each with
// its own index; two devices sharing an address are refused by name.
func TestAddressIndexFollowsNetBox(t *testing.T) {
	a, b := fleettest.Declared(1, "node-a"), fleettest.Declared(2, "node-b")
	a.Address, b.Address = netip.MustParsePrefix("10.0.0.5/24"), netip.MustParsePrefix("10.0.0.6/24")
	inv := fleettest.NewNetBox(a, b)
	one, two := newTestService(inv, fleettest.NewInstaller()), newTestService(inv, fleettest.NewInstaller())
	code := func(s testService, addr string) string {
		_, _, err := s.Delivery.FetchConfig(context.Background(), fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr(addr)})
		if r, ok := fleet.AsRefusal(err); ok {
			return r.Code
		}
		return fmt.Sprint(err)
	}
	for _, s := range []testService{one, two} {
		if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	a.Address = netip.MustParsePrefix("10.0.0.50/24") // the owner moves node-a; no instance has read it since
	inv.Set(a)
	if got := code(one, "10.0.0.50"); got != "unknown_address" {
		t.Errorf("new address before any read: %s, want unknown_address (the node asks again)", got)
	}
	if got := code(one, "10.0.0.5"); got != "unknown_address" {
		t.Errorf("refuse/old address after the move: %s, want unknown_address (the hit's read saw the move)", got)
	}
	if got := code(one, "10.0.0.50"); got != "no_pending_config" {
		t.Errorf("ok/new address after instance one read the device: %s, want its device found", got)
	}
	if got := code(two, "10.0.0.50"); got != "unknown_address" {
		t.Errorf("instance two, which has not read node-a since: %s, want unknown_address", got)
	}
	if _, err := two.Requests.Reconcile(context.Background(), 1); err != nil { // a Workflow event or webhook re-reads it
		t.Fatal(err)
	}
	if got := code(two, "10.0.0.50"); got != "no_pending_config" {
		t.Errorf("ok/instance two after it read node-a: %s, want its device found", got)
	}
	b.Address = a.Address
	inv.Set(b)
	if _, err := one.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := code(one, "10.0.0.50"); got != "address_shared" {
		t.Errorf("refuse/two devices at one address: %s, want address_shared", got)
	}
}

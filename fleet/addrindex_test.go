package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// listingNetBox is the in-memory NetBox whose device listing can fail (down) or be overtaken:
// during runs once after the listing has read the devices and before it returns, as a read of a
// device that happens while a slow listing is on its way back.
type listingNetBox struct {
	*fleettest.NetBox
	down     atomic.Bool
	listings atomic.Int32
	during   func()
}

func (l *listingNetBox) Devices(ctx context.Context) ([]fleet.Device, error) {
	l.listings.Add(1)
	if l.down.Load() {
		return nil, errors.New("GET /api/dcim/devices/: connection refused")
	}
	ds, err := l.NetBox.Devices(ctx)
	if f := l.during; f != nil {
		l.during = nil
		f()
	}
	return ds, err
}

// TestAddressIndexAnswers: what the index answers a fetch after each way NetBox and fleetd's reads
// can interleave. The newest sight of a device wins: a read made while a listing was on its way
// wins over the listing, a listing wins over a read made before it began, a write's answer counts
// as a read, and a device that leaves a shared address leaves the other one there.
func TestAddressIndexAnswers(t *testing.T) {
	ctx := context.Background()
	at := func(d fleet.Device, addr string) fleet.Device {
		d.Address = netip.MustParsePrefix(addr + "/24")
		return d
	}
	a, b := at(fleettest.Declared(1, "node-a"), "10.0.0.5"), at(fleettest.Declared(2, "node-b"), "10.0.0.6")
	for _, tc := range []struct {
		name string
		// steps runs against the service and its NetBox, a's address being 10.0.0.5 and b's
		// 10.0.0.6 at first; then each address of want is fetched from.
		steps func(t *testing.T, s testService, inv *listingNetBox)
		// want is each address fetched from, in order (a hit's read updates the index), and the
		// fetch's refusal code (no_pending_config: node-a or node-b found).
		want [][2]string
	}{
		{"ok/a read while the listing was on its way wins over the listing", func(t *testing.T, s testService, inv *listingNetBox) {
			if _, err := s.ReadDevice(ctx, 2); err != nil { // fleetd has seen a device before it lists
				t.Fatal(err)
			}
			inv.during = func() { // the owner moves node-a after the listing read it, and fleetd reads it
				inv.Set(at(inv.Get(1), "10.0.0.50"))
				if _, err := s.ReadDevice(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
		}, [][2]string{{"10.0.0.50", "no_pending_config"}, {"10.0.0.5", "unknown_address"}, {"10.0.0.6", "no_pending_config"}}},
		{"ok/the next listing wins over reads made during the one before", func(t *testing.T, s testService, inv *listingNetBox) {
			inv.during = func() { // both devices move after the first listing read them, and fleetd reads both
				inv.Set(at(inv.Get(1), "10.0.0.50"))
				inv.Set(at(inv.Get(2), "10.0.0.60"))
				for _, id := range []int64{1, 2} {
					if _, err := s.ReadDevice(ctx, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := fetchCode(s, "10.9.9.9"); got != "unknown_address" { // the first listing, for this fetch
				t.Fatalf("fetch from an unknown address: %s", got)
			}
			inv.Set(at(inv.Get(1), "10.0.0.51")) // both move again, and only the reconcile's listing sees it
			inv.Set(at(inv.Get(2), "10.0.0.61"))
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
		}, [][2]string{{"10.0.0.51", "no_pending_config"}, {"10.0.0.61", "no_pending_config"}}},
		{"ok/a listing wins over a read made before it began", func(t *testing.T, s testService, inv *listingNetBox) {
			if _, err := s.ReadDevice(ctx, 1); err != nil {
				t.Fatal(err)
			}
			inv.Set(at(inv.Get(1), "10.0.0.50")) // the first fetch's listing sees the move
		}, [][2]string{{"10.0.0.50", "no_pending_config"}, {"10.0.0.5", "unknown_address"}}},
		{"ok/a write's answer moves the device", func(t *testing.T, s testService, inv *listingNetBox) {
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			inv.Set(at(inv.Get(1), "10.0.0.50"))
			msg := "noted"
			if _, wrote, err := s.UpdateIfMatch(ctx, inv.Get(1), func(fleet.Device) (fleet.Patch, bool, error) {
				return fleet.Patch{Message: &msg}, true, nil
			}); err != nil || !wrote {
				t.Fatalf("write: %v, wrote %t", err, wrote)
			}
		}, [][2]string{{"10.0.0.50", "no_pending_config"}, {"10.0.0.5", "unknown_address"}}},
		{"ok/a device leaving a shared address leaves the other one there", func(t *testing.T, s testService, inv *listingNetBox) {
			inv.Set(at(inv.Get(2), "10.0.0.5"))
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			inv.Set(at(inv.Get(2), "10.0.0.6"))
			if _, err := s.ReadDevice(ctx, 2); err != nil {
				t.Fatal(err)
			}
		}, [][2]string{{"10.0.0.5", "no_pending_config"}, {"10.0.0.6", "no_pending_config"}}},
		{"refuse/two devices sharing an address", func(t *testing.T, s testService, inv *listingNetBox) {
			inv.Set(at(inv.Get(2), "10.0.0.5"))
		}, [][2]string{{"10.0.0.5", "address_shared"}, {"10.0.0.6", "unknown_address"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := &listingNetBox{NetBox: fleettest.NewNetBox(a, b)}
			s := newTestService(inv, fleettest.NewInstaller())
			tc.steps(t, s, inv)
			for _, w := range tc.want {
				if got := fetchCode(s, w[0]); got != w[1] {
					t.Errorf("fetch from %s: %s, want %s", w[0], got, w[1])
				}
			}
		})
	}
}

// TestAddressIndexWhileNetBoxIsDown: a fetch that finds the index never filled lists the devices;
// when the listing fails, the fetches of the next 10 s are answered NetBox unavailable without
// asking it again, and the first fetch 10 s after the failure lists again.
func TestAddressIndexWhileNetBoxIsDown(t *testing.T) {
	d := fleettest.Declared(1, "node-a")
	d.Address = netip.MustParsePrefix("10.0.0.5/24")
	inv := &listingNetBox{NetBox: fleettest.NewNetBox(d)}
	s := newTestService(inv, fleettest.NewInstaller())
	inv.down.Store(true)
	for _, step := range []struct {
		name     string
		advance  time.Duration // the clock moves before the fetch
		down     bool
		want     string // the refusal code, or "unavailable" for ErrNetBoxUnavailable
		listings int32  // the listings made so far
	}{
		{"refuse/first fetch, NetBox down: one listing", 0, true, "unavailable", 1},
		{"refuse/5 s later: no listing", 5 * time.Second, true, "unavailable", 1},
		{"refuse/just under 10 s after the failure: no listing", 5*time.Second - time.Millisecond, false, "unavailable", 1},
		{"refuse/10 s after the failure: lists again, still down", time.Millisecond, true, "unavailable", 2},
		{"refuse/NetBox back 9.999 s later: no listing yet", 10*time.Second - time.Millisecond, false, "unavailable", 2},
		{"ok/NetBox back 10 s later: lists, the device is found", time.Millisecond, false, "no_pending_config", 3},
		{"ok/the index filled: no listing", time.Hour, true, "no_pending_config", 3},
	} {
		s.clock.Advance(step.advance)
		inv.down.Store(step.down)
		got := fetchCode(s, "10.0.0.5")
		if strings.Contains(got, fleet.ErrNetBoxUnavailable.Error()) {
			got = "unavailable"
		}
		if got != step.want || inv.listings.Load() != step.listings {
			t.Errorf("%s: %s after %d listings, want %s after %d", step.name, got, inv.listings.Load(), step.want, step.listings)
		}
	}
}

// fetchCode is the refusal code of a Talos configuration fetch from addr, or its error's text.
func fetchCode(s testService, addr string) string {
	_, _, err := s.Delivery.FetchConfig(context.Background(), fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr(addr)})
	if r, ok := fleet.AsRefusal(err); ok {
		return r.Code
	}
	return fmt.Sprint(err)
}

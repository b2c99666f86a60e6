package fleet_test

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

const (
	pendUUID = "4C4C4544-0042-3510-8052-B2C04F4E4B32" // as dmidecode prints it
	pendID   = int64(42)
)

var pendAddr = netip.MustParseAddr("10.0.0.5")

func pendEntry() fleet.PendingEntry {
	return fleet.PendingEntry{Device: "node-a", AttestedUUID: pendUUID, Address: pendAddr,
		Config: fleet.NodeConfig{Kind: fleet.KindTalos, Body: []byte("version: v1alpha1\n"), Summary: "Talos worker config for node-a"}}
}

func newTestPending(t testing.TB) (*fleet.Pending, *renderClock) {
	t.Helper()
	clk := &renderClock{t: renderEpoch}
	p, err := fleet.NewPending(fleet.PendingConfig{Clock: clk, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func TestPendingTake(t *testing.T) {
	type step func(p *fleet.Pending, clk *renderClock)
	put := func(p *fleet.Pending, _ *renderClock) {
		if _, err := p.Put(pendID, pendEntry()); err != nil {
			panic(err)
		}
	}
	take := func(uuid string, addr netip.Addr) step {
		return func(p *fleet.Pending, _ *renderClock) { _, _ = p.Take(pendID, uuid, addr) }
	}
	advance := func(d time.Duration) step { return func(_ *fleet.Pending, clk *renderClock) { clk.Advance(d) } }
	sweep := func(p *fleet.Pending, _ *renderClock) { p.Sweep() }
	drop := func(p *fleet.Pending, _ *renderClock) { p.Drop(pendID) }

	cases := []struct {
		name    string
		before  []step
		uuid    string
		addr    netip.Addr
		want    error // nil: the configuration is returned
		pending int   // Len() afterwards
	}{
		{"ok/first-fetch", []step{put}, pendUUID, pendAddr, nil, 0},
		{"ok/uuid-in-lower-case", []step{put}, strings.ToLower(pendUUID), pendAddr, nil, 0},
		{"ok/ipv4-mapped-remote", []step{put}, pendUUID, netip.MustParseAddr("::ffff:10.0.0.5"), nil, 0},
		{"ok/after-wrong-attempts", []step{put, take("00000000-0000-0000-0000-000000000000", pendAddr), take(pendUUID, netip.MustParseAddr("10.0.0.9"))},
			pendUUID, pendAddr, nil, 0},
		{"ok/just-before-expiry", []step{put, advance(time.Hour - time.Second)}, pendUUID, pendAddr, nil, 0},
		{"ok/new-put-after-delivery", []step{put, take(pendUUID, pendAddr), put}, pendUUID, pendAddr, nil, 0},
		{"refuse/wrong-uuid", []step{put}, "00000000-0000-0000-0000-000000000000", pendAddr, fleet.ErrPendingWrongUUID, 1},
		{"refuse/empty-uuid", []step{put}, "", pendAddr, fleet.ErrPendingWrongUUID, 1},
		{"refuse/wrong-address", []step{put}, pendUUID, netip.MustParseAddr("10.0.0.9"), fleet.ErrPendingWrongAddress, 1},
		{"refuse/no-address", []step{put}, pendUUID, netip.Addr{}, fleet.ErrPendingWrongAddress, 1},
		{"refuse/second-fetch", []step{put, take(pendUUID, pendAddr)}, pendUUID, pendAddr, fleet.ErrPendingDelivered, 0},
		{"refuse/second-fetch-wrong-uuid", []step{put, take(pendUUID, pendAddr)}, "x", pendAddr, fleet.ErrPendingDelivered, 0},
		{"refuse/expired-before-sweep", []step{put, advance(time.Hour)}, pendUUID, pendAddr, fleet.ErrPendingExpired, 1},
		{"refuse/expired-after-sweep", []step{put, advance(2 * time.Hour), sweep}, pendUUID, pendAddr, fleet.ErrPendingExpired, 0},
		{"refuse/not-found", nil, pendUUID, pendAddr, fleet.ErrPendingNotFound, 0},
		{"refuse/dropped", []step{put, drop}, pendUUID, pendAddr, fleet.ErrPendingNotFound, 0},
		{"refuse/dropped-after-delivery", []step{put, take(pendUUID, pendAddr), drop}, pendUUID, pendAddr, fleet.ErrPendingNotFound, 0},
	}
	outcomes := []error{fleet.ErrPendingWrongUUID, fleet.ErrPendingWrongAddress, fleet.ErrPendingDelivered,
		fleet.ErrPendingExpired, fleet.ErrPendingNotFound}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, clk := newTestPending(t)
			for _, s := range tc.before {
				s(p, clk)
			}
			nc, err := p.Take(pendID, tc.uuid, tc.addr)
			if tc.want == nil {
				if err != nil || string(nc.Body) != "version: v1alpha1\n" {
					t.Fatalf("Take = %q, %v; want the configuration", nc.Body, err)
				}
			} else {
				if !errors.Is(err, tc.want) || len(nc.Body) != 0 {
					t.Fatalf("Take = %q, %v; want %v", nc.Body, err, tc.want)
				}
				for _, o := range outcomes {
					if o != tc.want && errors.Is(err, o) {
						t.Errorf("error %v is also %v: outcomes must be distinct", err, o)
					}
				}
			}
			if got := p.Len(); got != tc.pending {
				t.Errorf("Len() = %d afterwards, want %d", got, tc.pending)
			}
		})
	}
}

func TestPendingPutRefuses(t *testing.T) {
	p, _ := newTestPending(t)
	mod := func(f func(*fleet.PendingEntry)) fleet.PendingEntry { e := pendEntry(); f(&e); return e }
	cases := []struct {
		name string
		e    fleet.PendingEntry
		want string
	}{
		{"refuse/no-uuid", mod(func(e *fleet.PendingEntry) { e.AttestedUUID = " " }), "no attested UUID"},
		{"refuse/no-address", mod(func(e *fleet.PendingEntry) { e.Address = netip.Addr{} }), "no NetBox address"},
		{"refuse/empty-config", mod(func(e *fleet.PendingEntry) { e.Config.Body = nil }), "configuration is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := p.Put(pendID, tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Put = %v, want an error saying %q", err, tc.want)
			}
			if p.Len() != 0 {
				t.Error("a refused Put stored something")
			}
		})
	}
	if _, err := fleet.NewPending(fleet.PendingConfig{}); err == nil {
		t.Error("NewPending without a clock succeeded")
	}
}

func TestPendingSweepAndPeek(t *testing.T) {
	p, clk := newTestPending(t)
	for i, name := range []string{"a", "b", "c"} {
		e := pendEntry()
		e.Device = name
		if _, err := p.Put(int64(i+1), e); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Minute)
	}
	// a and b were put 70 and 60 minutes before now: both are due; c has 10 minutes left.
	clk.Advance(40 * time.Minute)
	got := p.Sweep()
	if len(got) != 2 || got[0].Device != "a" || got[1].Device != "b" || !got[0].Expired.Equal(renderEpoch.Add(time.Hour)) {
		t.Fatalf("Sweep = %+v, want a then b", got)
	}
	if again := p.Sweep(); len(again) != 0 {
		t.Errorf("second Sweep = %+v, want nothing", again)
	}
	info, ok := p.Peek(3)
	if !ok || info.Device != "c" || info.Kind != fleet.KindTalos || !info.Expires.Equal(renderEpoch.Add(80*time.Minute)) {
		t.Errorf("Peek(3) = %+v, %v", info, ok)
	}
	if _, ok := p.Peek(1); ok {
		t.Error("Peek shows a swept configuration")
	}
	if p.Len() != 1 {
		t.Errorf("Len() = %d, want 1", p.Len())
	}
}

// TestPendingConcurrentTake races many fetches, right and wrong, for one configuration: it is
// delivered exactly once.
func TestPendingConcurrentTake(t *testing.T) {
	p, _ := newTestPending(t)
	if _, err := p.Put(pendID, pendEntry()); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var (
		wg                         sync.WaitGroup
		mu                         sync.Mutex
		delivered, again, wrongOut int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uuid := pendUUID
			if i%4 == 0 {
				uuid = "00000000-0000-0000-0000-000000000000"
			}
			_, err := p.Take(pendID, uuid, pendAddr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				delivered++
			case errors.Is(err, fleet.ErrPendingDelivered):
				again++
			case errors.Is(err, fleet.ErrPendingWrongUUID):
				wrongOut++
			default:
				t.Errorf("unexpected outcome %v", err)
			}
		}()
	}
	wg.Wait()
	if delivered != 1 || delivered+again+wrongOut != n {
		t.Errorf("delivered %d, already-delivered %d, wrong-uuid %d; want exactly one delivery", delivered, again, wrongOut)
	}
}

// BenchmarkPendingTake measures one successful Take (each iteration takes a different device's
// configuration).
func BenchmarkPendingTake(b *testing.B) {
	p, _ := newTestPending(b)
	e := pendEntry()
	for i := range b.N {
		if _, err := p.Put(int64(i), e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := p.Take(int64(i), pendUUID, pendAddr); err != nil {
			b.Fatal(err)
		}
	}
}

package handlers

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestLimiterSourcesIPv6By64: an IPv6 host that changes its interface identifier stays in its
// /64's bucket; another /64 and IPv4 have their own; an IPv4-mapped address is its IPv4 address
// (docs/security.md, "A hostile host on the lab network").
func TestLimiterSourcesIPv6By64(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newAddrLimiter(Limits{PerMinute: 1, Burst: 2})
	take := func(a string) bool {
		ok, _ := l.allow(netip.MustParseAddr(a), now)
		return ok
	}
	for i := 0; i < 2; i++ {
		if !take(fmt.Sprintf("2001:db8:0:1::%x", i+1)) {
			t.Fatalf("address %d of the /64 refused within the burst", i+1)
		}
	}
	if take("2001:db8:0:1:dead:beef:0:1") {
		t.Error("ok/another interface identifier in the same /64 got a fresh bucket; want the /64's, exhausted")
	}
	if !take("fe80::1%eth0") {
		t.Error("a link-local address (fe80::/64, zone dropped) was refused: it is another source")
	}
	if !take("2001:db8:0:2::1") {
		t.Error("the next /64 was refused: it has its own bucket")
	}
	if !take("10.0.0.5") || !take("::ffff:10.0.0.5") || take("10.0.0.5") {
		t.Error("10.0.0.5 and ::ffff:10.0.0.5 are one source with a burst of 2")
	}
	if got := sourceName(netip.MustParseAddr("2001:db8:0:1::7")); got != "2001:db8:0:1::/64" {
		t.Errorf("sourceName of an IPv6 address = %q, want its /64", got)
	}
}

// TestLimiterIsBounded: a sweep of many spoofed sources keeps the table at its bound, shares one
// overflow bucket among the sources it could not track, and does not push out a tracked source to
// reset its limit; once buckets refill they are dropped and new sources are tracked again.
func TestLimiterIsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newAddrLimiter(Limits{PerMinute: 6, Burst: 2, MaxSources: 8}) // a token every 10 s
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	victim := netip.MustParseAddr("192.0.2.1")
	for i := 0; i < 2; i++ {
		if ok, _ := l.allow(victim, now); !ok {
			t.Fatal("the tracked source's burst was refused")
		}
	}
	overflowed := 0 // tokens taken by the sources after the first 7, which fill the table
	for i := 0; i < 100_000; i++ {
		if ok, _ := l.allow(addr(i), now); ok && i >= 7 {
			overflowed++
		}
	}
	if n := l.tracked(); n != 8 {
		t.Fatalf("refuse/unbounded: %d sources tracked after 100,000 spoofed ones, want the bound 8", n)
	}
	if overflowed > 2 {
		t.Errorf("refuse/overflow: %d untracked sources got a token at once, want at most the one shared burst of 2", overflowed)
	}
	if ok, _ := l.allow(victim, now); ok {
		t.Error("refuse/reset: the flood pushed the exhausted source out and it got a fresh bucket")
	}
	later := now.Add(21 * time.Second) // every bucket is full again: dropping them changes nothing
	if ok, _ := l.allow(addr(200_000), later); !ok {
		t.Fatal("ok/a new source after the flood refilled was refused")
	}
	if n := l.tracked(); n != 1 {
		t.Errorf("%d sources tracked after every bucket refilled and one new source asked, want 1", n)
	}
}

package handlers

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound what one source may ask of the routes they guard (the node-facing routes, the
// operator token's guesses).
type Limits struct {
	PerMinute float64 // sustained requests per minute per source; 0 means no limit
	Burst     int     // requests allowed at once
	// MaxSources bounds how many sources have a bucket of their own at once; 0 means
	// DefaultMaxSources.
	MaxSources int
}

// DefaultMaxSources is how many sources the limiter tracks at most: a lab network's hosts with
// room to spare, and about 1 MiB of buckets.
const DefaultMaxSources = 4096

// source is the unit a limit applies to: an IPv4 address, or the /64 an IPv6 address lies in. An
// IPv6 host picks its own interface identifier (SLAAC, RFC 4862) and holds many temporary
// addresses at once (RFC 8981), but a /64 is the smallest prefix a network hands a host (64-bit
// interface identifiers, RFC 4291 §2.5.1), so one host cannot spread its requests over 2^64
// buckets. An IPv4-mapped IPv6 address is its IPv4 address.
func source(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// addrLimiter is a token bucket per source, in a table of at most max sources. A bucket that has
// refilled to its burst answers exactly as a new one would, so full buckets are dropped (every
// minute, and whenever the table is full) without changing any answer: the table holds only the
// sources that asked within the last burst/rate. While it holds max sources that all asked that
// recently, a new source shares one overflow bucket with every other untracked source: a flood
// from more sources than the table holds is limited, together, to one source's rate, and cannot
// push a tracked source out to reset its limit.
type addrLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu       sync.Mutex
	buckets  map[netip.Prefix]*rate.Limiter
	overflow *rate.Limiter
	swept    time.Time // the last sweep of full buckets
}

func newAddrLimiter(l Limits) *addrLimiter {
	if l.PerMinute <= 0 {
		return nil
	}
	if l.Burst <= 0 {
		l.Burst = 1
	}
	if l.MaxSources <= 0 {
		l.MaxSources = DefaultMaxSources
	}
	lim := rate.Limit(l.PerMinute / 60)
	return &addrLimiter{limit: lim, burst: l.Burst, max: l.MaxSources,
		buckets: map[netip.Prefix]*rate.Limiter{}, overflow: rate.NewLimiter(lim, l.Burst)}
}

// allow takes a token for addr's source, or reports how long until one is free.
func (a *addrLimiter) allow(addr netip.Addr, now time.Time) (bool, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.bucket(addr, now).ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// exhausted reports whether addr's source has no token left, without taking one, and how long
// until one is free.
func (a *addrLimiter) exhausted(addr netip.Addr, now time.Time) (bool, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lim := a.bucket(addr, now)
	if tokens := lim.TokensAt(now); tokens < 1 {
		return true, time.Duration((1 - tokens) / float64(lim.Limit()) * float64(time.Second))
	}
	return false, 0
}

// bucket is the bucket of addr's source: its own, a new one while the table has room, or the
// overflow bucket. The caller holds mu.
func (a *addrLimiter) bucket(addr netip.Addr, now time.Time) *rate.Limiter {
	if now.Sub(a.swept) > time.Minute {
		a.sweep(now)
	}
	src := source(addr)
	if b := a.buckets[src]; b != nil {
		return b
	}
	if len(a.buckets) >= a.max && now.Sub(a.swept) >= time.Second {
		a.sweep(now) // at most once a second: a sweep reads the whole table
	}
	if len(a.buckets) >= a.max {
		return a.overflow
	}
	b := rate.NewLimiter(a.limit, a.burst)
	a.buckets[src] = b
	return b
}

// sweep drops the buckets that have refilled to their burst. The caller holds mu.
func (a *addrLimiter) sweep(now time.Time) {
	for k, b := range a.buckets {
		if b.TokensAt(now) >= float64(a.burst) {
			delete(a.buckets, k)
		}
	}
	a.swept = now
}

// tracked is how many sources have a bucket of their own (for tests and benchmarks).
func (a *addrLimiter) tracked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.buckets)
}

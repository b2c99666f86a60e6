package handlers

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/folly-infra/fleetd/api"
	"golang.org/x/time/rate"
)

// NodeFacing reports whether machines call the route (enrollment, configuration, boot checks):
// those are the routes served only over TLS when TLS is configured, and rate-limited per source
// address.
func (r Route) NodeFacing() bool {
	for _, p := range []string{"/v1/attest/", "/v1/config/", "/v1/boot-check"} {
		if strings.HasPrefix(r.Path, p) {
			return true
		}
	}
	return false
}

// Limits bound what one source address may ask of the node-facing routes.
type Limits struct {
	PerMinute float64 // sustained requests per minute per address; 0 means no limit
	Burst     int     // requests allowed at once
}

// addrLimiter is a token bucket per source address. Idle buckets are dropped so that a sweep of
// spoofed or many addresses cannot grow it without bound.
type addrLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newAddrLimiter(l Limits) *addrLimiter {
	if l.PerMinute <= 0 {
		return nil
	}
	if l.Burst <= 0 {
		l.Burst = 1
	}
	return &addrLimiter{limit: rate.Limit(l.PerMinute / 60), burst: l.Burst, buckets: map[netip.Addr]*bucket{}}
}

// allow takes a token for addr, or reports how long until one is free.
func (a *addrLimiter) allow(addr netip.Addr, now time.Time) (bool, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.bucket(addr, now).lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// exhausted reports whether addr has no token left, without taking one, and how long until one
// is free.
func (a *addrLimiter) exhausted(addr netip.Addr, now time.Time) (bool, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lim := a.bucket(addr, now).lim
	if tokens := lim.TokensAt(now); tokens < 1 {
		return true, time.Duration((1 - tokens) / float64(lim.Limit()) * float64(time.Second))
	}
	return false, 0
}

// bucket is addr's bucket, made when it has none; idle buckets are swept first. The caller holds mu.
func (a *addrLimiter) bucket(addr netip.Addr, now time.Time) *bucket {
	if now.Sub(a.swept) > time.Minute {
		for k, b := range a.buckets {
			if now.Sub(b.seen) > 10*time.Minute {
				delete(a.buckets, k)
			}
		}
		a.swept = now
	}
	b := a.buckets[addr]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(a.limit, a.burst)}
		a.buckets[addr] = b
	}
	b.seen = now
	return b
}

// rateLimited answers 429 with the seconds to wait.
func rateLimited(w http.ResponseWriter, addr netip.Addr, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
	writeJSON(w, http.StatusTooManyRequests, api.Error{Code: "rate_limited",
		Message: "too many requests from " + addr.String() + "; retry after the Retry-After seconds"})
}

// guard refuses a node-facing request that arrives over plain HTTP when TLS is configured, and one
// over its address's rate; it passes everything else on.
func (s *Server) guard(rt Route, h http.Handler) http.Handler {
	if !rt.NodeFacing() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.deps.NodesNeedTLS && r.TLS == nil {
			writeJSON(w, http.StatusForbidden, api.Error{Code: "tls_required",
				Message: "node routes are served only over HTTPS; use fleetd's https URL (public_url)"})
			return
		}
		if s.limiter != nil {
			addr, err := peerAddr(r.RemoteAddr)
			if err == nil {
				if ok, wait := s.limiter.allow(addr, time.Now()); !ok {
					rateLimited(w, addr, wait)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

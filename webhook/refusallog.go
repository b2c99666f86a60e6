package webhook

import (
	"net/netip"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultRefusalLogEvery is how often a source's refusals of one reason are logged at most.
const DefaultRefusalLogEvery = time.Minute

// maxRefusalSources bounds the sources and reasons refusalLog keeps apart at once; beyond it,
// the others share one count per reason.
const maxRefusalSources = 1024

// refusalLog writes refusals sampled, and the answers that make no work (coalesced, echo,
// ignored) too: the first of a source for a reason (an outcome) is logged, and then at most one
// line per source and reason per interval, whose "refusals" (or "events") is how many it stands
// for (those of that source and reason since the last line, this one included). A flood —
// unsigned, or signed by anyone who read the secret — therefore writes a few lines a minute; every
// answer is counted in the metric all the same. A source is an IPv4 address or an IPv6 /64 (the rate limit's unit:
// handlers' limiter.go); the table holds at most maxRefusalSources, and entries whose last
// line is older than the interval and that have nothing left to report are dropped to make room.
type refusalLog struct {
	log   zerolog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	seen map[refusalKey]*refusalCount
}

type refusalKey struct {
	source netip.Prefix // the zero Prefix: an unreadable peer, or a source beyond the table's room
	reason string
}

type refusalCount struct {
	logged time.Time // the last line's time
	count  int       // refusals since the last line
}

// refused notes one refusal and logs it when its source and reason had no line within the
// interval. detail says why; ev is the request's logger (its request id and route).
func (l *refusalLog) refused(ev *zerolog.Logger, peer netip.Addr, reason, detail string) {
	l.sampled(ev.Warn(), "refusals", peer, reason, detail)
}

// accepted notes one answer that made no work (outcome coalesced, echo or ignored) and logs it at
// info as refused logs a refusal.
func (l *refusalLog) accepted(ev *zerolog.Logger, peer netip.Addr, outcome, detail string) {
	l.sampled(ev.Info(), "events", peer, outcome, detail)
}

// sampled writes e, counted under countKey, when the line is due (refusalLog); e is discarded
// otherwise.
func (l *refusalLog) sampled(e *zerolog.Event, countKey string, peer netip.Addr, reason, detail string) {
	key := refusalKey{source: sourceOf(peer), reason: reason}
	now := l.now()
	l.mu.Lock()
	c, key := l.entry(key, now)
	c.count++
	if !c.logged.IsZero() && now.Sub(c.logged) < l.every {
		l.mu.Unlock()
		e.Discard()
		return
	}
	n := c.count
	c.logged, c.count = now, 0
	l.mu.Unlock()
	e.Str("step", "webhook").Str("outcome", reason).Str("source", sourceString(key.source)).
		Int(countKey, n).Str("detail", detail).Msg("decision")
}

// entry is key's count, made when missing, and the key it is kept under: key itself, or, beyond
// the table's room, the shared key of key's reason, whose zero source a line names "other". The
// caller holds mu.
func (l *refusalLog) entry(key refusalKey, now time.Time) (*refusalCount, refusalKey) {
	if c := l.seen[key]; c != nil {
		return c, key
	}
	if len(l.seen) >= maxRefusalSources {
		for k, c := range l.seen {
			if c.count == 0 && now.Sub(c.logged) >= l.every {
				delete(l.seen, k)
			}
		}
	}
	if len(l.seen) >= maxRefusalSources {
		key.source = netip.Prefix{}
		if c := l.seen[key]; c != nil {
			return c, key
		}
	}
	c := &refusalCount{}
	l.seen[key] = c
	return c, key
}

// sourceOf is the unit refusals are logged by: an IPv4 address, or the /64 of an IPv6 address
// (one host's addresses: RFC 4291 §2.5.1); the zero Prefix for an unreadable peer.
func sourceOf(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

func sourceString(p netip.Prefix) string {
	switch {
	case !p.IsValid():
		return "other"
	case p.Addr().Is4():
		return p.Addr().String()
	}
	return p.String()
}

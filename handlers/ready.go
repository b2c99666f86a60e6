package handlers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ReadyCheck is one dependency /readyz asks.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// readyMaxAge is how old a readiness result /readyz answers from may be: a load balancer's or
// systemd's polling, or anyone's flood of /readyz, costs NetBox and the Kubernetes API at most
// one request each per readyMaxAge.
const readyMaxAge = 2 * time.Second

// readyTimeout bounds one probe of every dependency (they are asked at once).
const readyTimeout = 3 * time.Second

// readiness is the last probe of the dependencies, shared: a result younger than readyMaxAge is
// answered as it is, and callers that find it older share one new probe (the first starts it,
// the others wait for it). The probe runs on its own context, so a caller that goes away does not
// cut it short for the others. A dependency's failure is logged when it starts and its recovery
// when it ends, never per call.
type readiness struct {
	checks []ReadyCheck
	now    func() time.Time
	log    zerolog.Logger

	mu      sync.Mutex
	at      time.Time         // when the last probe started; zero before the first
	failed  map[string]string // the last probe's failed dependencies and their errors
	probing chan struct{}     // closed when the probe under way ends; nil when none is
}

// result is the failed dependencies (name → error) of a probe at most readyMaxAge old, probing
// now when the last one is older. ctx bounds the wait only.
func (rd *readiness) result(ctx context.Context) (map[string]string, error) {
	rd.mu.Lock()
	if !rd.at.IsZero() && rd.now().Sub(rd.at) < readyMaxAge {
		defer rd.mu.Unlock()
		return rd.failed, nil
	}
	done := rd.probing
	if done == nil {
		done = make(chan struct{})
		rd.probing = done
		go rd.probe(done) //nolint:gosec // G118: the probe serves every request waiting on it, so no one request's context may end it; readyTimeout bounds it
	}
	rd.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.failed, nil
}

// probe asks every dependency at once, records the result and closes done.
func (rd *readiness) probe(done chan struct{}) {
	start := rd.now()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	errs := make([]error, len(rd.checks))
	var wg sync.WaitGroup
	for i, c := range rd.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Check(ctx)
		}()
	}
	wg.Wait()
	failed := map[string]string{}
	for i, c := range rd.checks {
		if errs[i] != nil {
			failed[c.Name] = errs[i].Error()
		}
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		if _, was := rd.failed[name]; !was {
			rd.log.Warn().Str("dependency", name).Str("error", failed[name]).Msg("not ready")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rd.failed)) {
		if _, still := failed[name]; !still {
			rd.log.Info().Str("dependency", name).Msg("ready again")
		}
	}
	rd.at, rd.failed, rd.probing = start, failed, nil
	close(done)
}

package fleettest

import (
	"context"
	"sync"

	"github.com/folly-infra/fleetd/fleet"
)

// ChangeLog is NetBox's change log as lists the test writes: it answers each query with the
// saves at or after its Since by anyone but its ExceptUser (and of its DeviceID), as NetBox's
// filters do, and keeps the queries asked.
type ChangeLog struct {
	mu      sync.Mutex
	Changes []fleet.DeviceChange
	MACs    []fleet.MACChange
	Queries []fleet.ChangeQuery
	Err     error // returned by every query when set (NetBox down)
}

func (l *ChangeLog) DeviceChanges(_ context.Context, q fleet.ChangeQuery) ([]fleet.DeviceChange, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Queries = append(l.Queries, q)
	if l.Err != nil {
		return nil, l.Err
	}
	var out []fleet.DeviceChange
	for _, ch := range l.Changes {
		if ch.Time.Before(q.Since) || q.DeviceID != 0 && ch.DeviceID != q.DeviceID || q.ExceptUser != "" && ch.User == q.ExceptUser {
			continue
		}
		out = append(out, ch)
	}
	return out, nil
}

func (l *ChangeLog) MACChanges(_ context.Context, q fleet.ChangeQuery) ([]fleet.MACChange, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Queries = append(l.Queries, q)
	if l.Err != nil {
		return nil, l.Err
	}
	var out []fleet.MACChange
	for _, ch := range l.MACs {
		if ch.Time.Before(q.Since) || q.ExceptUser != "" && ch.User == q.ExceptUser {
			continue
		}
		out = append(out, ch)
	}
	return out, nil
}

package fleettest

import (
	"context"
	"sync"
	"time"

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
	return selectChanges(l, q, func() []fleet.DeviceChange { return l.Changes }, func(ch fleet.DeviceChange) (time.Time, string, int64) { return ch.Time, ch.User, ch.DeviceID })
}

// MACChanges answers with the MAC address saves q selects; a MAC's save names no device, so
// q.DeviceID selects none of them out.
func (l *ChangeLog) MACChanges(_ context.Context, q fleet.ChangeQuery) ([]fleet.MACChange, error) {
	return selectChanges(l, q, func() []fleet.MACChange { return l.MACs }, func(ch fleet.MACChange) (time.Time, string, int64) { return ch.Time, ch.User, q.DeviceID })
}

// selectChanges records the query and returns the saves of the list (read under the lock) that
// it selects: at or after its Since, by anyone but its ExceptUser, of its DeviceID when it names
// one (what returns each save's time, user and device).
func selectChanges[C any](l *ChangeLog, q fleet.ChangeQuery, list func() []C, what func(C) (time.Time, string, int64)) ([]C, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Queries = append(l.Queries, q)
	if l.Err != nil {
		return nil, l.Err
	}
	var out []C
	for _, ch := range list() {
		at, user, device := what(ch)
		if at.Before(q.Since) || q.DeviceID != 0 && device != q.DeviceID || q.ExceptUser != "" && user == q.ExceptUser {
			continue
		}
		if dc, ok := any(ch).(fleet.DeviceChange); ok && q.Keep != nil && !q.Keep(dc) {
			continue
		}
		out = append(out, ch)
	}
	return out, nil
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The periodic reconcile's backstop for a write of fleetd's fields by another user whose webhook
// NetBox dropped (docs/design.md §9): it reads NetBox's change log of devices since its last run,
// and checks every device another user's save touched the fields of, as the webhook would have
// (checkOwnedFields): the trust check then puts fleetd's own values back.

// DeviceChange is one recorded save of a device in NetBox's change log (an update, or its
// creation: Before is then the zero Device): who saved it, when, and its custom fields and seal
// before and after the save (only those are read of Before and After).
//
// Trust: the change log is NetBox's own record, the one a NetBox user who may edit devices cannot
// write: who saved what is true there (fleetd trusts values only when its own user saved them
// last, trust.go). The values a save of another user left are never what fleetd writes back.
type DeviceChange struct {
	DeviceID      int64
	User          string
	Time          time.Time
	Before, After Device
}

// MACChange is one recorded save of a MAC address object (created, changed or deleted) in
// NetBox's change log: who, when, and its value before and after ("" where there is none).
type MACChange struct {
	User          string
	Time          time.Time
	Before, After string // lowercase, colon-separated
}

// ChangeQuery selects device updates from the change log.
type ChangeQuery struct {
	Since      time.Time // recorded at or after this time
	DeviceID   int64     // of this device only; 0 for every device
	ExceptUser string    // by any user but this one; "" for every user
	// Keep, when set, sees every change as it is read and reports whether the answer keeps it
	// (a long read keeps only what it needs, never the whole log at once).
	Keep func(DeviceChange) bool
}

// ChangeLog is NetBox's change log (NetBox 4.1 and later: /api/core/object-changes/).
//
// Errors: anything means the change log could not be read; the caller tries again at its next run.
type ChangeLog interface {
	// DeviceChanges lists the updates of devices the query selects, oldest first.
	DeviceChanges(ctx context.Context, q ChangeQuery) ([]DeviceChange, error)
	// MACChanges lists the saves of MAC addresses since q.Since by users other than
	// q.ExceptUser, oldest first (q.DeviceID is not used: a MAC's save names no device).
	MACChanges(ctx context.Context, q ChangeQuery) ([]MACChange, error)
}

// changeLogOverlap: later runs read from their previous run's start, less changeLogOverlap
// (NetBox's clock and a save that commits late). Reading a change twice is harmless: a device
// already repaired is trusted. The first run after a start reads back over the whole of NetBox's
// change log retention (Config.ChangeLogRetention): a write another user made while no fleetd
// ran is repaired however long ago it was made, as long as NetBox still records it — and once it
// does not, no later trust check could see it either, so the seal alone decides.
const changeLogOverlap = 2 * time.Minute

// changeLogMark is where the next run reads the change log from (per instance: every instance
// reads it, and the writes it causes are conditional).
type changeLogMark struct {
	mu   sync.Mutex
	last time.Time // the start of the last run that read it; zero before the first
}

func (m *changeLogMark) since(now time.Time, retention time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last.IsZero() {
		return now.Add(-retention)
	}
	return m.last.Add(-changeLogOverlap)
}

func (m *changeLogMark) done(start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if start.After(m.last) {
		m.last = start
	}
}

// loggedWrites are the devices another user's saves touched the fields of since the mark's
// last run, read from the change log, and when that read started.
type loggedWrites struct {
	ids   []int64
	start time.Time
}

// readLoggedWrites reads the change log for saves of devices by other users since the last run
// that touched fleetd's fields. It reads nothing without a change log or without fleetd's NetBox
// user (nobody can be told from fleetd).
func (s *foreignWrites) readLoggedWrites(ctx context.Context) (loggedWrites, error) {
	w := loggedWrites{start: s.core.clock.Now()}
	if s.changes == nil || s.serviceUser == "" {
		return w, nil
	}
	since := s.logMark.since(w.start, s.retention)
	seen := map[int64]bool{}
	keep := func(ch DeviceChange) bool {
		if touches(ch) && !seen[ch.DeviceID] {
			seen[ch.DeviceID] = true
			w.ids = append(w.ids, ch.DeviceID)
		}
		return false // only the ids are kept: the first run reads the whole retention
	}
	if _, err := s.changes.DeviceChanges(ctx, ChangeQuery{Since: since, ExceptUser: s.serviceUser, Keep: keep}); err != nil {
		return loggedWrites{}, fmt.Errorf("read NetBox's change log since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	return w, nil
}

// checkLoggedWrites checks each device w names (checkOwnedFields) and moves the mark to w's start
// when every check succeeded. It returns the devices it checked.
func (s *foreignWrites) checkLoggedWrites(ctx context.Context, w loggedWrites) (map[int64]bool, error) {
	checked := map[int64]bool{}
	var errs []error
	for _, id := range w.ids {
		checked[id] = true
		out, err := s.checkOwnedFields(ctx, id)
		s.core.logOutcome(out, err, "change-log")
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && !w.start.IsZero() {
		s.logMark.done(w.start)
	}
	return checked, errors.Join(errs...)
}

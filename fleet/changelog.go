package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The periodic reconcile's backstop for a written-back copy whose webhook NetBox dropped
// (docs/design.md §9): it reads NetBox's change log of devices since its last run, and where a
// field fleetd owns was last written by another user, it puts back the value fleetd had written
// before, as the webhook would have (UndoForeignWrite).

// DeviceChange is one recorded update of a device in NetBox's change log: who saved it, when,
// and its custom fields before and after the save (only those are read of Before and After).
//
// Trust: the change log is NetBox's own record; like a webhook's snapshots it says what a save
// changed, not what fleetd should do: the device is read again before anything is written.
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

// changeLogLookback is how far back the first run after a start reads the change log; later runs
// read from their previous run's start, less changeLogOverlap (NetBox's clock and a save that
// commits late). Reading a change twice is harmless: a write already put back is fleetd's last.
const (
	changeLogLookback = time.Hour
	changeLogOverlap  = 2 * time.Minute
)

// changeLogMark is where the next run reads the change log from (per instance: every instance
// reads it, and the writes it causes are conditional).
type changeLogMark struct {
	mu   sync.Mutex
	last time.Time // the start of the last run that read it; zero before the first
}

func (m *changeLogMark) since(now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last.IsZero() {
		return now.Add(-changeLogLookback)
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

// undoLoggedWrites reads the change log for saves of devices by other users since the last run,
// then each such device's whole history since, and undoes what still stands of them. It does
// nothing without a change log or without fleetd's NetBox user (nobody can be told from fleetd).
func (s *Service) undoLoggedWrites(ctx context.Context) error {
	if s.changes == nil || s.cfg.ServiceUser == "" {
		return nil
	}
	start := s.clock.Now()
	since := s.logMark.since(start)
	foreign, err := s.changes.DeviceChanges(ctx, ChangeQuery{Since: since, ExceptUser: s.cfg.ServiceUser})
	if err != nil {
		return fmt.Errorf("read NetBox's change log since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	first := map[int64]time.Time{} // the first foreign save of each device, by id
	var ids []int64
	for _, ch := range foreign {
		if _, seen := first[ch.DeviceID]; !seen {
			first[ch.DeviceID] = ch.Time
			ids = append(ids, ch.DeviceID)
		}
	}
	var errs []error
	for _, id := range ids {
		history, err := s.changes.DeviceChanges(ctx, ChangeQuery{Since: first[id], DeviceID: id})
		if err != nil {
			errs = append(errs, fmt.Errorf("read the change log of device %d: %w", id, err))
			continue
		}
		w, ok := standingWrite(history, s.cfg.ServiceUser)
		if !ok {
			continue
		}
		out, err := s.UndoForeignWrite(ctx, w)
		s.logOutcome(out, err, "change-log")
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		s.logMark.done(start)
	}
	return errors.Join(errs...)
}

// standingWrite composes, from one device's saves (oldest first), the write of other users that
// still stands: for each field fleetd owns, the saves by others after fleetd's last save of that
// field. Its Before holds, per field, the value before the first of them (the one fleetd wrote),
// its After the value the last of them wrote. A field fleetd saved last is fleetd's and left out
// (its Before and After are equal). The desired_action is the one of the save that wrote
// fleet_request back, so that a request written back with its copy is not taken again.
func standingWrite(history []DeviceChange, self string) (ForeignWrite, bool) {
	if len(history) == 0 {
		return ForeignWrite{}, false
	}
	latest := history[len(history)-1].After.Owned
	w := ForeignWrite{DeviceID: history[0].DeviceID}
	w.Before.Owned, w.After.Owned = latest, latest
	counted := make([]bool, len(history)) // the saves of others that still stand, in some field
	for _, f := range ownedFieldTable() {
		first, last := -1, -1
		for i, ch := range history {
			switch {
			case f.same(ch.Before.Owned, ch.After.Owned):
			case ch.User == self:
				first, last = -1, -1
			default:
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if first < 0 {
			continue
		}
		f.set(&w.Before.Owned, history[first].Before.Owned)
		f.set(&w.After.Owned, history[last].After.Owned)
		for i := first; i <= last; i++ {
			counted[i] = counted[i] || history[i].User != self
		}
		if f.name == "fleet_request" {
			w.After.Declared.DesiredAction = history[last].After.Declared.DesiredAction
		}
	}
	var users []string
	for i, ch := range history {
		if counted[i] && !slices.Contains(users, ch.User) {
			users = append(users, ch.User)
		}
	}
	if len(users) == 0 {
		return ForeignWrite{}, false
	}
	w.User = strings.Join(users, ", ")
	return w, true
}

package fleet

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
)

// core is what every use case shares: NetBox's devices, read judged and written sealed
// (trust.go, repair.go), the conditional write (conditional.go), the per-device locks, the clock,
// and the decision log, the journal and the metrics every decision feeds. It holds no port a use
// case alone calls: each use-case type adds its own (docs/design.md, "The domain by use case").
type core struct {
	netbox   trustedNetBox // every read judged (trust.go), every write sealed (repair.go)
	clock    Clock
	log      zerolog.Logger
	metrics  *metrics
	locks    deviceLocks
	keys     *SealKeys
	brake    sealBrake // whether fleetd may mark devices untrusted (repair.go)
	sealedAt sealTimes // when the next seal is made (repair.go)
}

// apply records one lifecycle event on the device: the transition's state, status and message in
// one conditional write, then the journal entry. An event that means nothing in the device's
// state (a duplicate) changes nothing.
func (s *core) apply(ctx context.Context, d Device, action Action, ev Event, msg string) (Outcome, error) {
	return s.applyWith(ctx, d, action, ev, msg, Patch{})
}

func (s *core) applyWith(ctx context.Context, d Device, action Action, ev Event, msg string, p Patch) (Outcome, error) {
	out, _, err := s.applyRecorded(ctx, d, action, ev, msg, p)
	return out, err
}

// applyRecorded is applyWith that also says whether it wrote: false when, re-read after a
// conflict, the device was on another request or the event no longer moved it (another fleetd
// instance recorded it first).
func (s *core) applyRecorded(ctx context.Context, d Device, action Action, ev Event, msg string, p Patch) (Outcome, bool, error) {
	out := outcomeFor(d, action, string(ev), "no-change")
	req := d.Owned.Request
	var t Transition
	got, wrote, err := s.updateOnOwnFields(ctx, d, func(d Device) (Patch, bool, error) {
		// The event is the request's, judged on fleetd's own values: it applies only while the
		// device is on the same request (another user's copy that had put back an older request
		// is undone, and nothing is recorded), and only if it still means a move from the state
		// it is in now.
		var ok bool
		if d.Owned.Request != req {
			return Patch{}, false, nil
		}
		if t, ok = Next(d.Owned.State, action, ev); !ok {
			return Patch{}, false, nil
		}
		return withTransition(p, d, t, msg), true, nil
	})
	if err != nil {
		return out, false, fmt.Errorf("record %s of %s: %w", ev, d.Name, netboxErr(err))
	}
	if !wrote {
		return out, false, nil
	}
	if t.To.Terminal() {
		result := "succeeded"
		switch t.To {
		case StateFailed:
			result = "failed"
		case StateUnconfirmed:
			result = string(StateUnconfirmed)
		}
		s.metrics.requests.WithLabelValues(string(action), result).Inc()
	}
	s.journal(ctx, got, t.Journal, msg)
	out.Result, out.Detail = string(t.To), msg
	return out, true, nil
}

// journal writes a journal entry; a failure is logged and counted, never fatal to the decision,
// which NetBox already holds in fleet_state and fleet_message.
func (s *core) journal(ctx context.Context, d Device, kind JournalKind, text string) {
	if err := s.netbox.Journal(ctx, d.ID, kind, text); err != nil {
		s.metrics.journalErrors.Inc()
		s.log.Error().Err(err).Str("device", d.Name).Str("journal", text).Msg("journal entry lost")
	}
}

func (s *core) logOutcome(out Outcome, err error, trigger string) {
	ev := s.log.Info()
	if err != nil {
		ev = s.log.Error().Err(err)
	}
	ev.Str("trigger", trigger).EmbedObject(out).Msg("decision")
}

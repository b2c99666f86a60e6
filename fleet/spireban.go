package fleet

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The SPIRE ban: a wipe or a retirement ends the device's SPIRE identity when it starts
// (docs/security.md, "SPIRE identity"), not when its last LDevID lapses. The ban never holds the
// request up: the claim's Workflow is created whatever SPIRE answers, and a ban that failed is
// tried again at every reconcile pass while the request runs.

// spireBanTimeout bounds one ban (a listing and one call per agent) so that an unresponsive SPIRE
// server holds no decision for long.
const spireBanTimeout = 30 * time.Second

// The results of fleetd_spire_bans_total.
const (
	SPIREBanned = "banned" // agents of the device were banned
	SPIRENone   = "none"   // the device had no agent left unbanned
	SPIREFailed = "failed" // the server could not be reached or refused: tried again
)

// bansSPIRE reports whether a request of this action ends the device's SPIRE identity.
func bansSPIRE(a Action) bool { return a == ActionWipe || a == ActionRetire }

// banSPIRE bans the device's SPIRE agents (SPIRE.BanDevice) for its running request: at the
// claim of a wipe or a retirement, and again at each reconcile pass while it runs, which retries
// a ban that failed and bans an agent that attested since (a node renewed but not restarted
// presents its newer LDevID, a new agent ID, only at its next re-attestation). It journals what
// it banned and the first failure of the request, counts every ban, and returns the sentence of
// the decision's log line ("" when there is nothing to say: no SPIRE configured, another action,
// nothing left to ban).
func (s *Requests) banSPIRE(ctx context.Context, d Device, action Action) string {
	if s.spire == nil || !bansSPIRE(action) {
		return ""
	}
	bctx, cancel := context.WithTimeout(ctx, spireBanTimeout)
	defer cancel()
	name := attestedName(d) // its LDevID's subject, never only the NetBox name an editor may change
	n, err := s.spire.BanDevice(bctx, name)
	key := strconv.FormatInt(d.ID, 10) + " " + d.Owned.Request
	if err != nil {
		s.core.metrics.spireBans.WithLabelValues(SPIREFailed).Inc()
		msg := fmt.Sprintf("SPIRE: the ban of %s's agents failed (%d banned before the failure): %v; fleetd tries again at each reconcile pass while %s runs, which goes on meanwhile.",
			name, n, err, d.Owned.Request)
		if _, journaled := s.spireFailures.LoadOrStore(key, true); !journaled {
			s.core.journal(ctx, d, JournalWarning, msg)
		}
		return msg
	}
	s.spireFailures.Delete(key)
	if n == 0 {
		s.core.metrics.spireBans.WithLabelValues(SPIRENone).Inc()
		return ""
	}
	s.core.metrics.spireBans.WithLabelValues(SPIREBanned).Inc()
	msg := fmt.Sprintf("SPIRE: banned %d agent(s) of %s (tpm_devid, LDevID subject CN %s) for %s: they can neither renew nor attest again.",
		n, d.Name, name, d.Owned.Request)
	s.core.journal(ctx, d, JournalInfo, msg)
	return msg
}

// withSentence appends a sentence (a ban's, a cordon's) to an outcome's detail.
func withSentence(detail, sentence string) string {
	switch {
	case sentence == "":
		return detail
	case detail == "":
		return sentence
	}
	return detail + " " + sentence
}

// newSPIREBans is fleetd_spire_bans_total: no device label, so the series stay three however
// large the fleet.
func newSPIREBans() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetd_spire_bans_total",
		Help: "Bans of a wiping or retiring device's SPIRE agents through the SPIRE server's agent API, by result: banned (agents were banned), none (no agent of the device was left unbanned), failed (tried again at the next reconcile pass).",
	}, []string{"result"})
}

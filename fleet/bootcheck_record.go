package fleet

import (
	"context"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"strconv"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/attest"
)

// How a boot check is recorded in NetBox (docs/design.md §2, §5):
//
//   - accepted (ok or drift): last_boot_check is the time fleetd accepted it (RFC 3339 with
//     nanoseconds, which the replay check compares nonce issue times with) and boot_check its
//     outcome. The first accepted check after an install (boot_baseline empty: a provision or an
//     attest clears it) sets boot_baseline. A check whose boot differs from the baseline is drift;
//     the baseline is kept, so every later check is compared with the same known boot until the
//     owner asks for a new one (attest or reprovision).
//   - failed (the device was identified, and its event log or Secure Boot failed): boot_check is
//     failed; last_boot_check stays, since it is the time of the last accepted check.
//
// A journal entry is written only when the outcome changes (the first baseline, ok → drift,
// drift → ok, anything → failed, failed → ok), never for another hourly ok or another drift.

// maxDriftSentences bounds the explanation a drift journal entry quotes; the node's answer has
// every sentence.
const maxDriftSentences = 5

// recordBootCheck compares a verified boot with the device's baseline and records the outcome.
func (s *BootChecks) recordBootCheck(ctx context.Context, d Device, out Outcome, c *bootCheck) (BootCheckResult, Outcome, error) {
	now := s.core.clock.Now().UTC()
	res := BootCheckResult{Device: d.Name, Outcome: BootCheckOK, SecureBoot: c.boot.SecureBootString(), CheckedAt: now}
	p := Patch{IfVersion: d.Version, LastBootCheck: &now, BootCheck: &res.Outcome}
	var kind JournalKind
	var msg string
	if d.Owned.BootBaseline == "" {
		baseline := c.boot.BaselineText
		p.BootBaseline, res.BaselineTaken = &baseline, true
		kind, msg = JournalInfo, fmt.Sprintf("First boot check of %s after its %s: baseline taken (%s; Secure Boot %s).",
			d.Name, baselineAfter(d), describeBaseline(c.boot.Baseline()), res.SecureBoot)
	} else {
		res.Changes = baselineChanges(d.Owned.BootBaseline, c.boot)
		if len(res.Changes) > 0 {
			res.Outcome = BootCheckDrift
		}
		if res.Outcome != d.Owned.BootCheck {
			kind, msg = bootCheckChanged(d, res)
		}
	}
	if f, changed := nextFacts(d.Owned.Facts, bootCheckProved(d, c.boot), c.claimed, now, layout.FactsFromBootCheck); changed {
		p.Facts = &f // in the check's one write, only when a fact changed
	}
	renewal, renewMsg := s.renew(d, c, res.Outcome, &p)
	recordAttestedName(d, &p)
	if _, err := s.core.update(ctx, d, p); err != nil {
		return BootCheckResult{}, out, fmt.Errorf("record the boot check of %s: %w", d.Name, netboxErr(err))
	}
	if msg != "" {
		s.core.journal(ctx, d, kind, msg)
	}
	if renewMsg != "" {
		s.core.journal(ctx, d, JournalInfo, renewMsg)
	}
	res.Renewal = renewal
	s.core.metrics.bootCheckRuns.WithLabelValues(string(res.Outcome)).Inc()
	for profile, result := range renewal.results() {
		s.core.metrics.renewals.WithLabelValues(string(profile), result).Inc()
	}
	out.Result = string(res.Outcome)
	if res.BaselineTaken {
		out.Detail = "baseline taken"
	} else if len(res.Changes) > 0 {
		out.Detail = summarize(res.Changes, maxDriftSentences)
	}
	if d := renewalDetail(renewal); d != "" {
		out.Detail = strings.TrimPrefix(out.Detail+"; "+d, "; ")
	}
	return res, out, nil
}

// baselineChanges explains how a verified boot differs from the stored baseline (none: the
// same boot). The same text is the same baseline, so an unchanged boot is neither parsed nor
// compared event by event.
func baselineChanges(stored string, boot *attest.VerifiedBoot) []string {
	if stored == boot.BaselineText {
		return nil
	}
	base, err := attest.ParseBaseline(stored)
	if err != nil {
		return []string{fmt.Sprintf("the stored boot_baseline cannot be read (%v)", err)}
	}
	return attest.DiffBaseline(base, boot.Baseline())
}

// bootCheckChanged is the journal entry of an accepted check whose outcome differs from the last.
func bootCheckChanged(d Device, res BootCheckResult) (JournalKind, string) {
	if res.Outcome == BootCheckDrift {
		return JournalWarning, fmt.Sprintf("Boot check of %s: the boot differs from its baseline: %s. "+
			"The baseline is kept; if the change was intended, set desired_action=attest (or provision again) so the next check takes a new one.",
			d.Name, summarize(res.Changes, maxDriftSentences))
	}
	if d.Owned.BootCheck == BootCheckNone {
		return JournalSuccess, fmt.Sprintf("Boot check of %s passed: the boot matches its baseline (Secure Boot %s).", d.Name, res.SecureBoot)
	}
	return JournalSuccess, fmt.Sprintf("Boot check of %s passed again after %s: the boot matches its baseline (Secure Boot %s).",
		d.Name, d.Owned.BootCheck, res.SecureBoot)
}

// recordBootFailure records a verification failure of the identified device: boot_check failed
// and a journal entry, unless the last check had failed too. The node gets the refusal.
func (s *BootChecks) recordBootFailure(ctx context.Context, d Device, out Outcome, failure error) (BootCheckResult, Outcome, error) {
	ar, _ := attest.AsRefusal(failure) // verifyBoot keeps only refusals
	out.Check, out.Result = string(ar.Check), string(BootCheckFailed)
	if d.Owned.BootCheck != BootCheckFailed {
		failed := BootCheckFailed
		if _, err := s.core.update(ctx, d, Patch{IfVersion: d.Version, BootCheck: &failed}); err != nil {
			return BootCheckResult{}, out, fmt.Errorf("record the failed boot check of %s: %w", d.Name, netboxErr(err))
		}
		last := "never"
		if !d.Owned.LastBootCheck.IsZero() {
			last = d.Owned.LastBootCheck.Format(time.RFC3339)
		}
		s.core.journal(ctx, d, JournalDanger, fmt.Sprintf("Boot check of %s failed (%s): %s. The quote was signed by the device's LAK, so this is the machine's own evidence; its last accepted check stays at %s.",
			d.Name, ar.Check, ar.Msg, last))
	}
	s.core.metrics.bootCheckRuns.WithLabelValues(string(BootCheckFailed)).Inc()
	return BootCheckResult{}, out, &Refusal{Class: RefusedInvalid, Code: string(ar.Check), Msg: ar.Msg, Err: failure}
}

// summarize joins at most n sentences and says how many more there are.
func summarize(sentences []string, n int) string {
	if len(sentences) <= n {
		return strings.Join(sentences, "; ")
	}
	return strings.Join(sentences[:n], "; ") + fmt.Sprintf("; and %d more changes", len(sentences)-n)
}

// describeBaseline says what a baseline holds: "82 events in PCRs 0-9, 14".
func describeBaseline(b attest.Baseline) string {
	events := 0
	var pcrs []string
	for i := 0; i < len(b.PCRs); i++ {
		events += len(b.PCRs[i].Events)
		j := i
		for j+1 < len(b.PCRs) && b.PCRs[j+1].Index == b.PCRs[j].Index+1 {
			j++
			events += len(b.PCRs[j].Events)
		}
		if j > i {
			pcrs = append(pcrs, strconv.Itoa(b.PCRs[i].Index)+"-"+strconv.Itoa(b.PCRs[j].Index))
		} else {
			pcrs = append(pcrs, strconv.Itoa(b.PCRs[i].Index))
		}
		i = j
	}
	return fmt.Sprintf("%d events in PCRs %s", events, strings.Join(pcrs, ", "))
}

// baselineAfter names what reset the device's boot baseline: its last request, an attest
// (which proves the machine again without installing) or a provision.
func baselineAfter(d Device) string {
	if RequestAction(d.Owned.Request) == ActionAttest {
		return "attestation (" + d.Owned.Request + ")"
	}
	return "installation"
}

// recordAttestedName completes an identity recorded before fleetd kept the name a device was
// attested as (IdentityMaterial.Name, AttestedAs), in the check's one write: the node has just
// proved the LAK fleetd issued for this name (the check found the device by its LAK's subject
// and holds it to its sealed lak_serial), so this name is the one its certificates carry. A
// device renamed before it was completed finds no device by its LAK's name and is refused
// before this. Every active node that checks in gets its name within an hour of the upgrade.
func recordAttestedName(d Device, p *Patch) {
	if d.Owned.Identity.Empty() || d.Owned.Identity.Name != "" {
		return
	}
	id := d.Owned.Identity
	if p.Identity != nil { // a renewal's, which keeps everything else of it
		id = *p.Identity
	}
	id.Name = d.Name
	p.Identity = &id
}

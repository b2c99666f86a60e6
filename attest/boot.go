package attest

import (
	"bytes"
	"crypto"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
)

// pcrCount is the number of PCRs a PC-client TPM has in each bank.
const pcrCount = 24

// VerifiedBoot is a machine's measured boot as the quote and event log prove it.
type VerifiedBoot struct {
	// Events are the event-log entries that replayed to the quoted SHA-256 PCRs, in log order.
	// A boot a BootCache answered has none (nil): it keeps only what a boot check uses.
	Events []attest.Event
	// SecureBoot is the Secure Boot state the verified events show; nil when it could not be
	// determined, with the reason in SecureBootErr. From a BootCache it carries only Enabled.
	SecureBoot    *attest.SecurebootState
	SecureBootErr error
	// BaselineText is the text form of the baseline (Baseline), as boot_baseline holds it.
	BaselineText string
	baseline     *Baseline // parsed, when this boot was replayed rather than cached
	// Quoted is the SHA-256 quote that verified this boot (VerifyPlatform), which a wipe
	// receipt's quote must match (receipt.go); nil from a BootCache.
	Quoted *QuotedBoot
}

// QuotedBoot is what a verified SHA-256 quote says of the TPM's state at the moment it quoted:
// the quoted PCR values, and its reset and restart counts as the quoting key sees them. A TPM
// obfuscates the counts for a key outside the endorsement and platform hierarchies (an AK under
// the SRK) with a value derived from the key's name, so they are compared only between quotes of
// the same key, where equal counts mean equal counts (the TCG reference implementation,
// Attest_spt.c FillInAttestInfo: the counts plus a KDFa of the storage hierarchy's proof and the
// key's name). A TPM Reset (a reboot) increments resetCount; a TPM Resume restartCount.
type QuotedBoot struct {
	PCRs                     []attest.PCR // the SHA-256 bank, PCR 0 to 23 in index order
	ResetCount, RestartCount uint32
}

// Baseline is the compact form of the verified events a later boot check compares against
// (docs/design.md §5).
func (vb *VerifiedBoot) Baseline() Baseline {
	if vb.baseline != nil {
		return *vb.baseline
	}
	b, _ := ParseBaseline(vb.BaselineText) // written by String, so it parses
	return b
}

// VerifyPlatform verifies a machine's platform attestation under a verified AK and the server
// nonce: every quote's signature and nonce; that the PCR values are the quoted ones (each PCR
// given once per bank, the SHA-256 bank complete); that the event log replays to the quoted
// SHA-256 PCRs; and it extracts the Secure Boot state from the replayed events.
//
// Only the SHA-256 bank is replayed, so every verified event carries a SHA-256 digest and the
// baseline is the same whichever other banks a TPM has. A log written without SHA-256 digests
// is refused.
func VerifyPlatform(ak *VerifiedAK, nonce []byte, claimed attest.PlatformParameters) (*VerifiedBoot, error) {
	sha256PCRs, err := verifyQuotes(ak, nonce, claimed)
	if err != nil {
		return nil, err
	}
	vb, err := replayBoot(claimed.EventLog, sha256PCRs)
	if err != nil {
		return nil, err
	}
	vb.Quoted = quotedBoot(claimed.Quotes, sha256PCRs)
	return vb, nil
}

// quotedBoot reads the TPM's counts from the first quote of the SHA-256 bank, which
// verifyQuotes verified (and checkQuoteNonces found).
func quotedBoot(verified []attest.Quote, sha256PCRs []attest.PCR) *QuotedBoot {
	for _, q := range verified {
		att, err := tpm2.DecodeAttestationData(q.Quote)
		if err != nil || att.AttestedQuoteInfo == nil || att.AttestedQuoteInfo.PCRSelection.Hash != tpm2.AlgSHA256 {
			continue
		}
		return &QuotedBoot{PCRs: slices.Clone(sha256PCRs), ResetCount: att.ClockInfo.ResetCount, RestartCount: att.ClockInfo.RestartCount}
	}
	return nil
}

// verifyQuotes verifies every quote's signature and nonce and the PCR values, and returns the
// quote-verified SHA-256 bank, in index order.
func verifyQuotes(ak *VerifiedAK, nonce []byte, claimed attest.PlatformParameters) ([]attest.PCR, error) {
	if len(claimed.Quotes) == 0 {
		return nil, refuse(CheckQuote, "the platform attestation has no quote")
	}
	if err := checkQuoteNonces(claimed.Quotes, nonce); err != nil {
		return nil, err
	}
	if err := checkPCRSet(claimed.PCRs); err != nil {
		return nil, err
	}
	pcrs := slices.Clone(claimed.PCRs)
	akPub := attest.AKPublic{Public: ak.Public, Hash: ak.Hash}
	if err := akPub.VerifyAll(claimed.Quotes, pcrs, nonce); err != nil {
		return nil, refuseErr(CheckQuote, err, "the quotes do not verify under the AK against the PCR values sent")
	}
	var sha256PCRs []attest.PCR
	for _, p := range pcrs {
		if p.DigestAlg == crypto.SHA256 && p.QuoteVerified() {
			sha256PCRs = append(sha256PCRs, p)
		}
	}
	if len(sha256PCRs) != pcrCount {
		return nil, refuse(CheckQuote, "the quotes cover %d of the %d SHA-256 PCRs; all of them are needed", len(sha256PCRs), pcrCount)
	}
	slices.SortFunc(sha256PCRs, func(a, b attest.PCR) int { return a.Index - b.Index })
	return sha256PCRs, nil
}

// replayBoot replays the event log against the quote-verified SHA-256 PCRs and reads the boot's
// baseline and Secure Boot state from the verified events.
func replayBoot(claimedLog []byte, sha256PCRs []attest.PCR) (*VerifiedBoot, error) {
	events, err := replay(claimedLog, sha256PCRs)
	if err != nil {
		return nil, err
	}
	base := NewBaseline(events)
	vb := &VerifiedBoot{Events: events, BaselineText: base.String(), baseline: &base}
	vb.SecureBoot, vb.SecureBootErr = attest.ParseSecurebootState(events)
	if vb.SecureBootErr != nil {
		vb.SecureBoot = nil
	}
	return vb, nil
}

// checkQuoteNonces refuses a quote made for another nonce (go-attestation checks it too, with a
// message that prints Go byte slices) and a set of quotes without one over the SHA-256 bank.
func checkQuoteNonces(quotes []attest.Quote, nonce []byte) error {
	sha256Quoted := false
	for i, q := range quotes {
		att, err := tpm2.DecodeAttestationData(q.Quote)
		if err != nil {
			return refuseErr(CheckQuote, err, "quote %d is not a TPMS_ATTEST made by a TPM", i)
		}
		if att.Type != tpm2.TagAttestQuote || att.AttestedQuoteInfo == nil {
			return refuse(CheckQuote, "attestation %d is not a quote (tag 0x%x)", i, att.Type)
		}
		if !bytes.Equal(att.ExtraData, nonce) {
			return refuse(CheckQuote, "quote %d was made for nonce %x, not for this enrollment's nonce %x", i, []byte(att.ExtraData), nonce)
		}
		sha256Quoted = sha256Quoted || att.AttestedQuoteInfo.PCRSelection.Hash == tpm2.AlgSHA256
	}
	if !sha256Quoted {
		return refuse(CheckQuote, "no quote covers the SHA-256 PCR bank")
	}
	return nil
}

// checkPCRSet refuses a PCR given twice in one bank: go-attestation marks every entry of a
// quoted index verified, so a second, false value would pass the quote and replay a false log.
// It refuses an index a PC-client TPM does not have, or a hash no bank uses, before any quote
// is read.
func checkPCRSet(pcrs []attest.PCR) error {
	var seen [crypto.BLAKE2b_512 + 1]uint32 // per hash, a bit per PCR index
	for _, p := range pcrs {
		if p.Index < 0 || p.Index >= pcrCount || p.DigestAlg >= crypto.Hash(len(seen)) {
			return refuse(CheckQuote, "PCR %d (%v) is not one of a TPM's %d PCRs of a known bank", p.Index, p.DigestAlg, pcrCount)
		}
		bit := uint32(1) << p.Index
		if seen[p.DigestAlg]&bit != 0 {
			return refuse(CheckQuote, "PCR %d (%v) is given more than once", p.Index, p.DigestAlg)
		}
		seen[p.DigestAlg] |= bit
	}
	return nil
}

// replay parses the event log and replays it against the quote-verified SHA-256 PCRs.
func replay(claimedLog []byte, pcrs []attest.PCR) ([]attest.Event, error) {
	el, err := attest.ParseEventLog(claimedLog)
	if err != nil {
		return nil, refuseErr(CheckEventLog, err, "the event log does not parse")
	}
	if !slices.Contains(el.Algs, attest.HashSHA256) {
		return nil, refuse(CheckEventLog, "the event log has no SHA-256 digests (it carries %v)", el.Algs)
	}
	events, err := el.Verify(pcrs)
	if err != nil {
		if re, ok := err.(attest.ReplayError); ok {
			return nil, refuseErr(CheckEventLog, err, "the event log does not replay to the quoted SHA-256 PCRs %v", re.InvalidPCRs)
		}
		return nil, refuseErr(CheckEventLog, err, "the event log does not replay to the quoted SHA-256 PCRs")
	}
	return events, nil
}

// RequireSecureBoot applies a class's Secure Boot policy to a verified boot: when required, the
// verified events must show Secure Boot enabled.
func RequireSecureBoot(vb *VerifiedBoot, required bool) error {
	if !required {
		return nil
	}
	if vb.SecureBoot == nil {
		return refuseErr(CheckSecureBoot, vb.SecureBootErr, "the class requires Secure Boot and the event log does not show its state")
	}
	if !vb.SecureBoot.Enabled {
		return refuse(CheckSecureBoot, "the class requires Secure Boot and the verified event log shows it disabled")
	}
	return nil
}

// SecureBootString summarises the Secure Boot state for logs and journal entries.
func (vb *VerifiedBoot) SecureBootString() string {
	switch {
	case vb.SecureBoot == nil:
		return fmt.Sprintf("unknown (%v)", vb.SecureBootErr)
	case vb.SecureBoot.Enabled:
		return "enabled"
	default:
		return "disabled"
	}
}

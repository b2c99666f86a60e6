package fleet

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/folly-infra/fleetd/attest"
)

// recordingInventory records what the capped inventory passes on.
type recordingInventory struct {
	NetBox
	messages, entries []string
}

func (r *recordingInventory) Update(_ context.Context, _ int64, p Patch) (Device, error) {
	if p.Message != nil {
		r.messages = append(r.messages, *p.Message)
	}
	return Device{}, nil
}

func (r *recordingInventory) Journal(_ context.Context, _ int64, _ JournalKind, text string) error {
	r.entries = append(r.entries, text)
	return nil
}

// TestCappedInventory: whatever a step writes, fleet_message stays within MaxMessage and a
// journal entry within MaxJournalEntry, cut on a rune boundary and marked; short ones pass
// unchanged.
func TestCappedInventory(t *testing.T) {
	rec := &recordingInventory{}
	inv := cappedNetBox{rec}
	long := strings.Repeat("é", 10<<10) // two bytes each: a cut in the middle of a rune would show
	short := "Attested node-a."
	for _, m := range []string{long, short} {
		if _, err := inv.Update(context.Background(), 1, Patch{Message: &m}); err != nil {
			t.Fatal(err)
		}
		if err := inv.Journal(context.Background(), 1, JournalInfo, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		got []string
		max int
	}{{rec.messages, MaxMessage}, {rec.entries, MaxJournalEntry}} {
		if len(c.got[0]) > c.max || !utf8.ValidString(c.got[0]) || !strings.HasSuffix(c.got[0], "…") {
			t.Errorf("a long message became %d bytes (valid UTF-8: %v), want at most %d, cut and marked", len(c.got[0]), utf8.ValidString(c.got[0]), c.max)
		}
		if c.got[1] != short {
			t.Errorf("a short message became %q", c.got[1])
		}
	}
}

// TestPublicSentences: every attestation check has a fixed sentence of its own, and none
// carries a format verb (a sentence is never formatted with what the caller sent).
func TestPublicSentences(t *testing.T) {
	for _, c := range []attest.Check{attest.CheckTPMVersion, attest.CheckEKMalformed, attest.CheckEKApproved, attest.CheckEKCertMissing,
		attest.CheckEKCertChain, attest.CheckEKCertKey, attest.CheckAK, attest.CheckToken, attest.CheckTokenExpired,
		attest.CheckTokenBinding, attest.CheckActivation, attest.CheckQuote, attest.CheckEventLog, attest.CheckSecureBoot,
		attest.CheckBootPolicy, attest.CheckLDevID, attest.CheckDiskAbsent, attest.CheckDiskAmbiguous, attest.CheckDiskMalformed,
		attest.CheckNonceInvalid, attest.CheckNonceExpired, attest.CheckLAKMalformed, attest.CheckLAKUntrusted, attest.CheckLAKMismatch,
		attest.CheckReceiptToken, attest.CheckReceiptExpired, attest.CheckReceiptMismatch, attest.CheckReceiptMalformed, attest.CheckReceiptNonce,
		attest.CheckReceiptBoot, attest.CheckReceiptSignature, attest.CheckReceiptDisk, attest.CheckReceiptWipeFailed} {
		if PublicSentence(string(c)) == unknownSentence {
			t.Errorf("check %s has no fixed sentence", c)
		}
	}
	for code, s := range publicSentences {
		if strings.Contains(s, "%") || len(s) > MaxMessage/2 || !strings.HasSuffix(s, ".") {
			t.Errorf("%s: sentence %q has a format verb, is too long or does not end a sentence", code, s)
		}
	}
}

// TestCapText: a sentence fleetd writes into a capped field keeps at most the cap's bytes, cut on
// a rune boundary and marked with "…"; one that fits, to the last byte, is kept whole.
func TestCapText(t *testing.T) {
	for _, r := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"ok/exactly the cap: whole", "abcdefgh", 8, "abcdefgh"},
		{"ok/a byte over: cut and marked", "abcdefghi", 8, "abcde…"},
		{"ok/a cut inside a rune moves before it", "abcdéfgh!", 8, "abcd…"},
		{"ok/a cut on a rune's first byte keeps the runes before it", "abcdeé€", 8, "abcde…"},
		{"ok/bytes that are no UTF-8 at all: the mark alone", strings.Repeat("\x80", 10), 8, "…"},
	} {
		got := capText(r.in, r.n)
		if got != r.want || len(got) > r.n {
			t.Errorf("%s: capText(%q, %d) = %q, want %q", r.name, r.in, r.n, got, r.want)
		}
	}
}

package attest

import (
	"crypto"
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// replayedPCRs computes the SHA-256 PCR values a TPM would hold after a log's events.
func replayedPCRs(t testing.TB, raw []byte) []attest.PCR {
	el, err := attest.ParseEventLog(raw)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[int][]byte{}
	for _, e := range el.Events(attest.HashSHA256) {
		if e.Type == 3 { // EV_NO_ACTION is not extended
			continue
		}
		v, ok := vals[e.Index]
		if !ok {
			v = make([]byte, sha256.Size)
		}
		h := sha256.Sum256(append(slices.Clone(v), e.Digest...))
		vals[e.Index] = h[:]
	}
	var pcrs []attest.PCR
	for i := 0; i < pcrCount; i++ {
		v, ok := vals[i]
		if !ok {
			v = make([]byte, sha256.Size)
		}
		pcrs = append(pcrs, attest.PCR{Index: i, Digest: v, DigestAlg: crypto.SHA256})
	}
	return pcrs
}

// FuzzEventLog mutates recorded event logs and replays them against the PCRs of the original
// boot: parsing and description never panic, and a mutated log that still verifies has exactly
// the original's measured content (types and digests) — so the baseline a boot check compares
// cannot be changed by bytes the PCRs do not cover.
func FuzzEventLog(f *testing.F) {
	logs := [][]byte{eventlogs.RHEL8SecureBoot, eventlogs.Ubuntu2104NoSecureBoot}
	pcrs := make([][]attest.PCR, len(logs))
	want := make([]Baseline, len(logs))
	for i, l := range logs {
		f.Add(uint8(i), l)
		pcrs[i] = replayedPCRs(f, l)
		ev, err := replay(l, pcrs[i])
		if err != nil {
			f.Fatalf("the recorded log %d does not replay to its own PCRs: %v", i, err)
		}
		want[i] = NewBaseline(ev)
	}
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		i := int(which) % len(logs)
		el, err := attest.ParseEventLog(raw)
		if err != nil {
			return
		}
		for _, e := range el.Events(attest.HashSHA256) {
			_ = describeEvent(e) // unverified data must not panic the describer
		}
		ev, err := replay(raw, pcrs[i]) // what VerifyPlatform does after the quote verified
		if err != nil {
			return
		}
		got := NewBaseline(ev)
		if !sameMeasurements(got, want[i]) {
			t.Fatalf("a mutated log verified with different measurements")
		}
		_ = DiffBaseline(want[i], got)
	})
}

func sameMeasurements(a, b Baseline) bool {
	if len(a.PCRs) != len(b.PCRs) {
		return false
	}
	for i := range a.PCRs {
		x, y := a.PCRs[i], b.PCRs[i]
		if x.Index != y.Index || len(x.Events) != len(y.Events) {
			return false
		}
		for j := range x.Events {
			if x.Events[j].Type != y.Events[j].Type || x.Events[j].Digest != y.Events[j].Digest {
				return false
			}
		}
	}
	return true
}

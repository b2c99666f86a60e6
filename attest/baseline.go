package attest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-attestation/attest"
)

// A baseline is the compact, stable form of a verified boot that NetBox's boot_baseline holds and
// a later boot check is compared against (docs/design.md §5). Per PCR it lists the verified events in
// order, each as (event type, digest, short description). The text form is:
//
//	fleetd-baseline/1
//	4 EV_EFI_BOOT_SERVICES_APPLICATION 3f2a…(32 hex) shimx64.efi
//
// one line per event, ordered by PCR then log order. Digests are the first 16 bytes of the
// SHA-256 event digest (128 bits: a second preimage stays out of reach), which keeps a typical
// baseline under 10 KB.

const (
	baselineHeader    = "fleetd-baseline/1"
	baselineDigestLen = 16 // bytes of the SHA-256 event digest kept
)

// Baseline is the per-PCR list of verified boot events.
type Baseline struct {
	PCRs []BaselinePCR
}

// BaselinePCR is one PCR's events, in log order.
type BaselinePCR struct {
	Index  int
	Events []BaselineEvent
}

// BaselineEvent is one measured event.
type BaselineEvent struct {
	Type   string // e.g. "EV_EFI_BOOT_SERVICES_APPLICATION"
	Digest string // lowercase hex of the digest's first 16 bytes
	Desc   string // a short description from the event data (file name, variable name, text), may be empty
}

// NewBaseline builds the baseline of verified events.
func NewBaseline(events []attest.Event) Baseline {
	byPCR := map[int][]BaselineEvent{}
	for _, e := range events {
		d := e.Digest
		if len(d) > baselineDigestLen {
			d = d[:baselineDigestLen]
		}
		byPCR[e.Index] = append(byPCR[e.Index], BaselineEvent{
			Type: eventTypeName(e.Type), Digest: hex.EncodeToString(d), Desc: describeEvent(e),
		})
	}
	var b Baseline
	for idx, evs := range byPCR {
		b.PCRs = append(b.PCRs, BaselinePCR{Index: idx, Events: evs})
	}
	sort.Slice(b.PCRs, func(i, j int) bool { return b.PCRs[i].Index < b.PCRs[j].Index })
	return b
}

// String is the text form (see above).
func (b Baseline) String() string {
	var sb strings.Builder
	sb.WriteString(baselineHeader)
	for _, p := range b.PCRs {
		for _, e := range p.Events {
			fmt.Fprintf(&sb, "\n%d %s %s", p.Index, e.Type, e.Digest)
			if e.Desc != "" {
				sb.WriteString(" " + e.Desc)
			}
		}
	}
	return sb.String()
}

// ParseBaseline reads the text form back.
func ParseBaseline(s string) (Baseline, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if lines[0] != baselineHeader {
		return Baseline{}, errors.New("parse baseline: it does not start with " + baselineHeader)
	}
	var b Baseline
	for n, line := range lines[1:] {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 {
			return Baseline{}, fmt.Errorf("parse baseline: line %d has %d fields, want at least 3", n+2, len(f))
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 || idx >= pcrCount {
			return Baseline{}, fmt.Errorf("parse baseline: line %d: PCR %q is not 0-23", n+2, f[0])
		}
		e := BaselineEvent{Type: f[1], Digest: f[2]}
		if len(f) == 4 {
			e.Desc = f[3]
		}
		if len(b.PCRs) == 0 || b.PCRs[len(b.PCRs)-1].Index != idx {
			if len(b.PCRs) > 0 && b.PCRs[len(b.PCRs)-1].Index > idx {
				return Baseline{}, fmt.Errorf("parse baseline: line %d: PCR %d after PCR %d", n+2, idx, b.PCRs[len(b.PCRs)-1].Index)
			}
			b.PCRs = append(b.PCRs, BaselinePCR{Index: idx})
		}
		last := &b.PCRs[len(b.PCRs)-1]
		last.Events = append(last.Events, e)
	}
	return b, nil
}

// DiffBaseline explains how a boot differs from a baseline, one sentence per changed event, for
// example "PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION digest changed: shimx64.efi". Events are
// matched per PCR by their longest common subsequence; an unmatched old and new event of the
// same type and description is a changed digest, others were added or removed. No sentences
// means the boots are the same.
func DiffBaseline(old, cur Baseline) []string {
	oldBy, curBy := old.byIndex(), cur.byIndex()
	indexes := map[int]bool{}
	for i := range oldBy {
		indexes[i] = true
	}
	for i := range curBy {
		indexes[i] = true
	}
	sorted := make([]int, 0, len(indexes))
	for i := range indexes {
		sorted = append(sorted, i)
	}
	sort.Ints(sorted)
	var out []string
	for _, i := range sorted {
		out = append(out, diffPCR(i, oldBy[i], curBy[i])...)
	}
	return out
}

func (b Baseline) byIndex() map[int][]BaselineEvent {
	m := map[int][]BaselineEvent{}
	for _, p := range b.PCRs {
		m[p.Index] = p.Events
	}
	return m
}

// diffPCR explains the difference between two event lists of one PCR.
func diffPCR(index int, old, cur []BaselineEvent) []string {
	removed, added := unmatched(old, cur)
	sentence := func(e BaselineEvent, what string) string {
		s := fmt.Sprintf("PCR %d: %s %s", index, e.Type, what)
		if e.Desc != "" {
			s += ": " + e.Desc
		}
		return s
	}
	var out []string
	for _, r := range removed {
		pair := -1
		for j, a := range added {
			if a.Type == r.Type && a.Desc == r.Desc {
				pair = j
				break
			}
		}
		if pair < 0 {
			out = append(out, sentence(r, "removed"))
			continue
		}
		out = append(out, sentence(r, "digest changed"))
		added = append(added[:pair], added[pair+1:]...)
	}
	for _, a := range added {
		out = append(out, sentence(a, "added"))
	}
	return out
}

// unmatched returns the events of old and cur outside their longest common subsequence.
func unmatched(old, cur []BaselineEvent) (removed, added []BaselineEvent) {
	n, m := len(old), len(cur)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if old[i] == cur[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case old[i] == cur[j]:
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			removed, i = append(removed, old[i]), i+1
		default:
			added, j = append(added, cur[j]), j+1
		}
	}
	return append(removed, old[i:]...), append(added, cur[j:]...)
}

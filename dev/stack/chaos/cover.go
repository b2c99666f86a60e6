package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// NotPlayed is why a played schedule did not play what it says, one line per step ("" none):
// a step of the world's own levers (kind.must) that did not happen — an owner's PATCH that
// never went through, a NetBox fault that faulted nothing, the API server not stopped or not
// started, fleetd not killed — or steps never played because the run was cut short. Such a
// schedule proves nothing about the promise, so it fails like a violation.
func NotPlayed(sc Schedule, res []StepResult) []string {
	var out []string
	for i, r := range res {
		for _, e := range r.Events {
			if e.Must && e.Outcome != Happened {
				out = append(out, fmt.Sprintf("step %d (%s): %s %s: %v", i+1, r.Step, e.Key, e.Outcome, e.Err))
			}
		}
	}
	if len(res) < len(sc.Steps) {
		out = append(out, fmt.Sprintf("steps %d–%d were never played (the run was cut short)", len(res)+1, len(sc.Steps)))
	}
	return out
}

// Count is what became of one coverage key over a run.
type Count struct {
	Drawn                  int // steps drawn with the key
	Happened, Idle, Failed int // events with the key, by outcome
}

// Tally counts, by coverage key (Keys), what a run's schedules drew and what became of it.
type Tally struct {
	Schedules int
	counts    map[string]*Count
}

func (t *Tally) count(k string) *Count {
	if t.counts == nil {
		t.counts = map[string]*Count{}
	}
	if t.counts[k] == nil {
		t.counts[k] = &Count{}
	}
	return t.counts[k]
}

// Add counts one played schedule: its drawn steps and the events of what it played.
func (t *Tally) Add(sc Schedule, res []StepResult) {
	t.Schedules++
	for _, s := range sc.Steps {
		for _, k := range s.Keys() {
			t.count(k).Drawn++
		}
	}
	for _, r := range res {
		for _, e := range r.Events {
			c := t.count(e.Key)
			switch e.Outcome {
			case Happened:
				c.Happened++
			case Idle:
				c.Idle++
			default:
				c.Failed++
			}
		}
	}
}

// Count is the count of one key.
func (t *Tally) Count(k string) Count {
	if c := t.counts[k]; c != nil {
		return *c
	}
	return Count{}
}

// Never lists the keys of Keys that never happened in the run.
func (t *Tally) Never() []string {
	var out []string
	for _, k := range Keys() {
		if t.Count(k).Happened == 0 {
			out = append(out, k)
		}
	}
	return out
}

// String is the coverage table, one "coverage" line per key in Keys' order (and any key the
// run met that Keys lacks, last), then the totals.
func (t *Tally) String() string {
	var b strings.Builder
	keys := Keys()
	for k := range t.counts {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	width := 0
	for _, k := range keys {
		width = max(width, len(k))
	}
	var sum Count
	fmt.Fprintf(&b, "coverage: %-*s %6s %8s %5s %6s\n", width, "step", "drawn", "happened", "idle", "failed")
	for _, k := range keys {
		c := t.Count(k)
		sum.Drawn, sum.Happened, sum.Idle, sum.Failed = sum.Drawn+c.Drawn, sum.Happened+c.Happened, sum.Idle+c.Idle, sum.Failed+c.Failed
		mark := ""
		if c.Happened == 0 {
			mark = "  never happened"
		}
		fmt.Fprintf(&b, "coverage: %-*s %6d %8d %5d %6d%s\n", width, k, c.Drawn, c.Happened, c.Idle, c.Failed, mark)
	}
	fmt.Fprintf(&b, "coverage: %-*s %6d %8d %5d %6d  (%d schedules; %d of %d keys happened)\n", width, "all", sum.Drawn, sum.Happened,
		sum.Idle, sum.Failed, t.Schedules, len(Keys())-len(t.Never()), len(Keys()))
	return b.String()
}

// CoveringSeeds picks seeds, among the candidates from base on, whose schedules together draw
// every coverage key at least times times: greedily, each next seed the one drawing the most
// draws still wanted (the fewer steps, then the lower seed, on a tie). The same arguments give
// the same seeds, and a new kind in the table is drawn without anyone picking seeds by hand.
// The error names the keys no candidate draws often enough.
func CoveringSeeds(cfg Config, base int64, candidates, times int) ([]int64, error) {
	want := map[string]int{}
	for _, k := range Keys() {
		want[k] = times * max(coverWeight[k], 1)
	}
	drawn, steps := make([]map[string]int, candidates), make([]int, candidates)
	for i := range drawn {
		drawn[i] = map[string]int{}
		sc := Generate(base+int64(i), cfg)
		steps[i] = len(sc.Steps)
		for _, s := range sc.Steps {
			for _, k := range s.Keys() {
				drawn[i][k]++
			}
		}
	}
	var seeds []int64
	used := make([]bool, candidates)
	for missing(want) != nil {
		best, gain := -1, 0
		for i := range drawn {
			g := 0
			for k, n := range drawn[i] {
				g += min(n, want[k])
			}
			if !used[i] && g > 0 && (g > gain || (g == gain && steps[i] < steps[best])) {
				best, gain = i, g
			}
		}
		if best < 0 {
			return seeds, fmt.Errorf("seeds %d–%d never draw %v %d times", base, base+int64(candidates)-1, missing(want), times)
		}
		used[best] = true
		seeds = append(seeds, base+int64(best))
		for k, n := range drawn[best] {
			want[k] = max(want[k]-n, 0)
		}
	}
	slices.Sort(seeds)
	return seeds, nil
}

func missing(want map[string]int) []string {
	var out []string
	for _, k := range Keys() {
		if want[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

package load_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// latencies is a set of measured durations.
type latencies []time.Duration

// String is "n=…, p50 …, p99 …, max …".
func (l latencies) String() string {
	if len(l) == 0 {
		return "n=0"
	}
	s := slices.Clone(l)
	slices.Sort(s)
	pct := func(p int) time.Duration { return s[min(len(s)-1, len(s)*p/100)] }
	round := func(d time.Duration) time.Duration { // to the millisecond, or 10 µs below 10 ms
		if d < 10*time.Millisecond {
			return d.Round(10 * time.Microsecond)
		}
		return d.Round(time.Millisecond)
	}
	return fmt.Sprintf("n=%d p50 %s p99 %s max %s", len(s), round(pct(50)), round(pct(99)), round(s[len(s)-1]))
}

// parallel runs f for every name, at most n at a time, and returns each call's duration and
// the names whose call failed, with the errors.
func parallel(ctx context.Context, names []string, n int, f func(context.Context, string) error) (latencies, map[string]error) {
	var mu sync.Mutex
	var lat latencies
	failed := map[string]error{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	for _, name := range names {
		g.Go(func() error {
			start := time.Now()
			err := f(gctx, name)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, time.Since(start))
			if err != nil {
				failed[name] = err
			}
			return nil
		})
	}
	_ = g.Wait()
	return lat, failed
}

// creations records when each Workflow fleetd creates appears, by device id.
type creations struct {
	mu   sync.Mutex
	seen map[int64]time.Time
	n    map[int64]int
}

// watchCreations watches the Workflows with fleetd's device label from now on.
func watchCreations(t *testing.T, s *stack.Stack) *creations {
	t.Helper()
	w, err := s.Kube().Watch(context.Background(), &tinkerbell.WorkflowList{}, client.InNamespace(s.Info().Namespace),
		client.HasLabels{workflows.LabelDeviceID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	c := &creations{seen: map[int64]time.Time{}, n: map[int64]int{}}
	go func() {
		for ev := range w.ResultChan() {
			wf, ok := ev.Object.(*tinkerbell.Workflow)
			if !ok || ev.Type != watch.Added {
				continue
			}
			id, _ := strconv.ParseInt(wf.Labels[workflows.LabelDeviceID], 10, 64)
			c.mu.Lock()
			if _, ok := c.seen[id]; !ok {
				c.seen[id] = time.Now()
			}
			c.n[id]++
			c.mu.Unlock()
		}
	}()
	return c
}

// wait waits until every id has a Workflow (or d passes) and returns when each appeared.
func (c *creations) wait(ids []int64, d time.Duration) (map[int64]time.Time, []int64) {
	end := time.Now().Add(d)
	for {
		c.mu.Lock()
		var missing []int64
		for _, id := range ids {
			if _, ok := c.seen[id]; !ok {
				missing = append(missing, id)
			}
		}
		out := make(map[int64]time.Time, len(c.seen))
		for k, v := range c.seen {
			out[k] = v
		}
		c.mu.Unlock()
		if len(missing) == 0 || time.Now().After(end) {
			return out, missing
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rssSampler samples fleetd's resident memory every interval and keeps the largest.
type rssSampler struct {
	mu   sync.Mutex
	peak int // KiB
	stop chan struct{}
}

func sampleRSS(s *stack.Stack, every time.Duration) *rssSampler {
	r := &rssSampler{stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if kib, err := vmRSS(s.FleetdPID()); err == nil {
				r.mu.Lock()
				r.peak = max(r.peak, kib)
				r.mu.Unlock()
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *rssSampler) Peak() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// vmRSS reads VmRSS (KiB) of a process.
func vmRSS(pid int) (int, error) {
	m, err := memStatus(pid)
	return m.rss, err
}

// mem is a process's resident memory (KiB): the whole, its anonymous pages (heap, stacks,
// runtime) and the pages of its files (the binary's code and read-only data).
type mem struct{ rss, anon, file int }

// memStatus reads VmRSS, RssAnon and RssFile of a process from /proc/PID/status.
func memStatus(pid int) (mem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return mem{}, err
	}
	defer f.Close()
	var m mem
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, k := range []struct {
			key string
			v   *int
		}{{"VmRSS:", &m.rss}, {"RssAnon:", &m.anon}, {"RssFile:", &m.file}} {
			if v, ok := strings.CutPrefix(sc.Text(), k.key); ok {
				if *k.v, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); err != nil {
					return mem{}, fmt.Errorf("/proc/%d/status: %s %q: %w", pid, k.key, v, err)
				}
				found++
			}
		}
	}
	if found != 3 {
		return mem{}, fmt.Errorf("/proc/%d/status has no VmRSS, RssAnon or RssFile", pid)
	}
	return m, nil
}

// restRSS samples fleetd's resident memory every 250 ms for d (at least one reconcile interval:
// fleetd lists every device once in it, so the samples hold a reconcile's garbage as well as the
// quiet between) and describes the samples: the smallest, the median and the largest, the largest split
// into anonymous and file pages.
func restRSS(pid int, d time.Duration) (string, error) {
	var all []mem
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		m, err := memStatus(pid)
		if err != nil {
			return "", err
		}
		all = append(all, m)
	}
	slices.SortFunc(all, func(a, b mem) int { return a.rss - b.rss })
	top := all[len(all)-1]
	return fmt.Sprintf("%s to %s (median %s) over %s, %d samples; the largest %s anonymous, %s the binary's pages",
		mib(all[0].rss), mib(top.rss), mib(all[len(all)/2].rss), d, len(all), mib(top.anon), mib(top.file)), nil
}

func mib(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

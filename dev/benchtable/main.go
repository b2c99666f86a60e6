// Command benchtable writes the table of `make bench` (docs/performance.md, "Benchmarks"): each figure of
// docs/performance.md beside its floor or peer and their ratio, from the output of
// `go test -bench -benchmem`. It replaces the part of the document between the two markers and
// keeps the rest (the load test's figures, written from `make load`).
//
//	go run ./dev/benchtable -out docs/performance.md bench.txt [more.txt ...]
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/dev/benchcpu"
)

// The markers around the generated part of the document.
const (
	beginMarker = "<!-- benchtable: begin (make bench writes this part) -->"
	endMarker   = "<!-- benchtable: end -->"
)

// pair is one row: a figure and what it is measured against.
type pair struct {
	figure      string
	bench, peer string // benchmark names without the GOMAXPROCS suffix; peer "" for a value row
	metric      string // for a value row: the metric reported (e.g. netbox-requests/check)
	goal        string
}

var pairs = []pair{
	{figure: "boot check, a node's repeated check of the same boot, verification", bench: "BootCheckVerify/repeated", peer: "BootCheckFloor", goal: "≤ 2×"},
	{figure: "boot check, a first check (nothing cached), verification", bench: "BootCheckVerify/first", peer: "BootCheckFloor"},
	{figure: "boot check through HTTP and the NetBox adapter, NetBox requests per check", bench: "BootCheckHTTP/netbox-emulator", metric: "netbox-requests/check", goal: "≤ 3"},
	{figure: "enrollment through the handlers vs the sum of its crypto steps (interop/spire)", bench: "FleetdEnrollmentServer", peer: "FleetdEnrollmentSteps", goal: "≤ 1.5×"},
	{figure: "enrollment through the handlers vs SPIRE's tpm_devid server attest (interop/spire)", bench: "FleetdEnrollmentServer", peer: "SPIREServerAttest"},
	{figure: "enrollment, both round trips through the real routes (attest) vs its steps", bench: "EnrollmentServer", peer: "EnrollmentSteps"},
	{figure: "500 provisions decided at once by 16 workers, NetBox at 25 ms a request (dev/stack, in one process), p99 from the storm's start", bench: "ProvisionStorm", metric: "p99-ms", goal: "< 5000"},
	{figure: "the same, the process's CPU per decision (NetBox emulator and API server included)", bench: "ProvisionStorm", metric: "cpu-ms/decision"},
	{figure: "one periodic reconcile pass over 10,000 sealed, active devices (steady state), NetBox requests: 1 change log page, 10 device pages, 40 interface pages", bench: "ReconcilePass/devices-10000", metric: "netbox-requests/pass", goal: "≤ 25 + 1 a page"},
	{figure: "the same, devices read one by one", bench: "ReconcilePass/devices-10000", metric: "devices-read/pass", goal: "0"},
	{figure: "the Kea reservations file of 10,000 devices written (a reservation changed: render, compare, atomic replace with fsync)", bench: "KeaSync/changed", metric: "ms/sync", goal: "≤ 100"},
}

// result is one benchmark's line.
type result struct {
	nsOp, bytesOp, allocsOp float64
	cpuNsOp                 float64 // the process's CPU time per iteration (dev/benchcpu), 0 when not reported
	metrics                 map[string]float64
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parse reads `go test -bench` output: the last result of each benchmark, and the cpu line.
func parse(r io.Reader, into map[string]result) (cpu string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.TrimSpace(v)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		res := result{metrics: map[string]float64{}}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			switch f[i+1] {
			case "ns/op":
				res.nsOp = v
			case "B/op":
				res.bytesOp = v
			case "allocs/op":
				res.allocsOp = v
			case benchcpu.Metric:
				res.cpuNsOp = v
			default:
				res.metrics[f[i+1]] = v
			}
		}
		into[m[1]] = res
	}
	return cpu, sc.Err()
}

// table renders the rows; a benchmark missing from the run says so.
func table(res map[string]result) string {
	var b strings.Builder
	b.WriteString("| figure | measured | floor or peer | ratio (time / CPU time / allocations) | goal |\n|---|---|---|---|---|\n")
	for _, p := range pairs {
		r, ok := res[p.bench]
		if !ok {
			fmt.Fprintf(&b, "| %s | `%s` not run | | | %s |\n", p.figure, p.bench, p.goal)
			continue
		}
		if p.peer == "" {
			v, ok := r.metrics[p.metric]
			if !ok {
				fmt.Fprintf(&b, "| %s | `%s` reported no %s | | | %s |\n", p.figure, p.bench, p.metric, p.goal)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s %s (`%s`) | | | %s |\n", p.figure, strconv.FormatFloat(v, 'f', -1, 64), p.metric, p.bench, p.goal)
			continue
		}
		q, ok := lookup(res, p.peer)
		if !ok {
			fmt.Fprintf(&b, "| %s | %s (`%s`) | `%s` not run | | %s |\n", p.figure, describe(r), p.bench, p.peer, p.goal)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s (`%s`) | %s (`%s`) | %s / %s / %s | %s |\n", p.figure, describe(r), p.bench, describe(q), p.peer,
			ratio(r.nsOp, q.nsOp), ratio(r.cpuNsOp, q.cpuNsOp), ratio(r.allocsOp, q.allocsOp), p.goal)
	}
	return b.String()
}

// lookup is a benchmark's result, or the sum of its sub-benchmarks' (a Steps benchmark is one
// sub-benchmark per step, and the peer is their sum). The CPU time is summed only when every
// step reported it; otherwise it is 0, and the ratio says "—".
func lookup(res map[string]result, name string) (result, bool) {
	if r, ok := res[name]; ok {
		return r, true
	}
	var sum result
	found, cpuEach := false, true
	for n, r := range res {
		if strings.HasPrefix(n, name+"/") {
			sum.nsOp, sum.bytesOp, sum.allocsOp = sum.nsOp+r.nsOp, sum.bytesOp+r.bytesOp, sum.allocsOp+r.allocsOp
			sum.cpuNsOp += r.cpuNsOp
			cpuEach = cpuEach && r.cpuNsOp > 0
			found = true
		}
	}
	if !cpuEach {
		sum.cpuNsOp = 0
	}
	return sum, found
}

func describe(r result) string {
	if r.cpuNsOp > 0 {
		return fmt.Sprintf("%s (CPU %s), %s, %.0f allocs", duration(r.nsOp), duration(r.cpuNsOp), size(r.bytesOp), r.allocsOp)
	}
	return fmt.Sprintf("%s, %s, %.0f allocs", duration(r.nsOp), size(r.bytesOp), r.allocsOp)
}

func duration(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	default:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
}

func size(b float64) string {
	if b >= 1024 {
		return fmt.Sprintf("%.1f KB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

// ratio is a / b, or "—" when either side was not measured (a benchmark that reports no CPU
// time has 0 there: its ratio is unknown, not 0×).
func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// splice puts the generated part between the markers of doc (appending both when doc has none).
func splice(doc []byte, part string) ([]byte, error) {
	gen := beginMarker + "\n" + part + endMarker
	i, j := bytes.Index(doc, []byte(beginMarker)), bytes.Index(doc, []byte(endMarker))
	switch {
	case i < 0 && j < 0:
		return append(append(bytes.TrimRight(doc, "\n"), "\n\n"...), gen+"\n"...), nil
	case i < 0 || j < i:
		return nil, errors.New("the document has one benchtable marker without the other, or them in the wrong order: fix it by hand")
	}
	return append(append(append([]byte{}, doc[:i]...), gen...), doc[j+len(endMarker):]...), nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%s %s %s (1, 5, 15 min)", f[0], f[1], f[2])
}

func main() {
	out := flag.String("out", "docs/performance.md", "the document to write the table into")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: name the files with `go test -bench -benchmem` output")
		os.Exit(2)
	}
	res := map[string]result{}
	cpu := "unknown"
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		c, err := parse(f, res)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: read %s: %v\n", name, err)
			os.Exit(1)
		}
		if c != "" {
			cpu = c
		}
	}
	doc, err := os.ReadFile(*out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	part := fmt.Sprintf("Written by `make bench` on %s: %s, %d cores, load average at the end %s. Times on a shared "+
		"machine move with its load; the CPU time of the benchmark's own process (where it is reported, dev/benchcpu) moves "+
		"much less, and allocations not at all, so read those ratios where the times disagree.\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), cpu, runtime.NumCPU(), loadAverage(), table(res))
	doc, err = splice(doc, part)
	if err == nil {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	fmt.Print(part)
}

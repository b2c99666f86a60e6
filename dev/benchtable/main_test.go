package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
cpu: Oxide Virtual Turin-like Processor
BenchmarkBootCheckVerify/repeated-2         	    4767	    415451 ns/op	   18680 B/op	     164 allocs/op
BenchmarkBootCheckFloor-2                   	   10000	    207725 ns/op	    100000 cpu-ns/op	    1376 B/op	       8 allocs/op
BenchmarkEnrollmentServer-2   	      76	  16000000 ns/op	 1472929 B/op	    9000 allocs/op
BenchmarkEnrollmentSteps/platform-2         	     896	   1000000 ns/op	    500000 cpu-ns/op	  350454 B/op	    3000 allocs/op
BenchmarkEnrollmentSteps/ldevid-2           	   10000	    1000000 ns/op	    5824 B/op	     1500 allocs/op
BenchmarkFleetdEnrollmentServer-2   	     200	   6000000 ns/op	   3000000 cpu-ns/op	  709899 B/op	    5695 allocs/op
BenchmarkFleetdEnrollmentSteps/platform-2 	     200	   1000000 ns/op	    800000 cpu-ns/op	  350705 B/op	    3380 allocs/op
BenchmarkFleetdEnrollmentSteps/issue-lak-2 	     200	   2000000 ns/op	   1200000 cpu-ns/op	   24752 B/op	     422 allocs/op
BenchmarkProvisionStorm-2   	       1	3042219572 ns/op	         9.519 cpu-ms/decision	       164.4 decisions/s	      1566 p50-ms	      3012 p99-ms
BenchmarkSPIREServerAttest-2 	     200	   2000000 ns/op	   50000 tpm-ns/op	  100000 B/op	     1000 allocs/op
BenchmarkBootCheckHTTP/netbox-emulator-2    	     100	  10957663 ns/op	        91.26 checks/s	         2.030 netbox-requests/check	  751420 B/op	    4160 allocs/op
PASS
`

// TestTable checks the rows: a ratio of time, of CPU time and of allocations, a peer that is the
// sum of its sub-benchmarks, a reported metric, a CPU time missing on either side ("—", never
// 0×), a sum of steps of which one reported no CPU time (none summed), and a benchmark missing
// from the run named as not run.
func TestTable(t *testing.T) {
	res := map[string]result{}
	cpu, err := parse(strings.NewReader(sample), res)
	if err != nil || cpu != "Oxide Virtual Turin-like Processor" {
		t.Fatalf("parse: cpu %q, %v", cpu, err)
	}
	got := table(res)
	for _, want := range []string{
		// the measured side reports no CPU time, the floor does
		"| boot check, a node's repeated check of the same boot, verification | 415.5 µs, 18.2 KB, 164 allocs (`BootCheckVerify/repeated`) | 207.7 µs (CPU 100.0 µs), 1.3 KB, 8 allocs (`BootCheckFloor`) | 2.0× / — / 20.5× | ≤ 2× |",
		"| 2.03 netbox-requests/check (`BootCheckHTTP/netbox-emulator`) |",
		"`BootCheckVerify/first` not run",
		"(`EnrollmentSteps`) | 8.0× / — / 2.0× |", // the sum of its steps
		// the sum of its steps, CPU time too: 3.00 / (0.80 + 1.20) ms
		"| 6.00 ms (CPU 3.00 ms), 693.3 KB, 5695 allocs (`FleetdEnrollmentServer`) | 3.00 ms (CPU 2.00 ms), 366.7 KB, 3802 allocs (`FleetdEnrollmentSteps`) | 2.0× / 1.5× / 1.5× | ≤ 1.5× |",
		"(`SPIREServerAttest`) | 3.0× / — / 5.7× |", // the peer reports no CPU time
		"| 3012 p99-ms (`ProvisionStorm`) | | | < 5000 |",
		"| 9.519 cpu-ms/decision (`ProvisionStorm`) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table has no %q:\n%s", want, got)
		}
	}
	// EnrollmentSteps/platform reported CPU time and EnrollmentSteps/ldevid none: a sum of one
	// step's CPU time would pass for the whole's.
	if r, _ := lookup(res, "EnrollmentSteps"); r.cpuNsOp != 0 {
		t.Errorf("EnrollmentSteps' CPU time is %.0f ns, want none (one step reported none)", r.cpuNsOp)
	}
}

// TestSplice checks that the generated part replaces only what is between the markers, is
// appended to a document without them, and that a lone marker is refused.
func TestSplice(t *testing.T) {
	doc := "# Performance\n\nbefore\n" + beginMarker + "\nold table\n" + endMarker + "\n\n## Load\n\nkept\n"
	out, err := splice([]byte(doc), "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Performance\n\nbefore\n" + beginMarker + "\nnew table\n" + endMarker + "\n\n## Load\n\nkept\n"; string(out) != want {
		t.Errorf("spliced:\n%s\nwant:\n%s", out, want)
	}
	if out, err := splice([]byte("# Performance\n"), "t\n"); err != nil || !strings.HasSuffix(string(out), beginMarker+"\nt\n"+endMarker+"\n") {
		t.Errorf("appended: %q, %v", out, err)
	}
	if _, err := splice([]byte("x\n"+endMarker+"\n"), "t\n"); err == nil {
		t.Error("a document with only the end marker was spliced")
	}
}

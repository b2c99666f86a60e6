package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gremlinsJSON is gremlins v0.6.0's --output for a package of two files (its totals, which this
// command does not read, left out).
const gremlinsJSON = `{"go_module":"github.com/folly-infra/fleetd","test_efficacy":75,"files":[
{"file_name":"a.go","mutations":[
 {"type":"CONDITIONALS_NEGATION","status":"KILLED","line":10,"column":9},
 {"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":12,"column":20},
 {"type":"ARITHMETIC_BASE","status":"NOT VIABLE","line":14,"column":3},
 {"type":"CONDITIONALS_NEGATION","status":"KILLED","line":9,"column":2}]},
{"file_name":"b.go","mutations":[
 {"type":"CONDITIONALS_NEGATION","status":"KILLED","line":3,"column":5},
 {"type":"INCREMENT_DECREMENT","status":"TIMED OUT","line":7,"column":4},
 {"type":"CONDITIONALS_NEGATION","status":"NOT COVERED","line":30,"column":4},
 {"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":2,"column":11}]}]}`

const doc = `# Testing

<!-- mutants: begin (make mutants writes this table) -->
| package | killed | lived | not covered | timed out | not viable | efficacy | mutant coverage | target | measured |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---|
| pki | 100 | 0 | 10 | 0 | 0 | 100.0% | 90.9% | ≥ 90% | 2026-11-30, aaaaaaa |
| attest | 1 | 1 | 0 | 0 | 0 | 50.0% | 100.0% | ≥ 90% | 2026-11-30, aaaaaaa |
<!-- mutants: end -->

The rest.
`

// TestRun: the figures are counted from the mutations (a timed-out mutant, which gremlins'
// totals leave out, is counted as timed out; a not viable one in no figure), the package's row
// replaces its row in the document and keeps the others, and a package below its target fails
// the run after the document is written.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "attest.json")
	docFile := filepath.Join(dir, "testing.md")
	if err := os.WriteFile(res, []byte(gremlinsJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRow := "| attest | 3 | 2 | 1 | 1 | 1 | 60.0% | 83.3% | ≥ 90% | 2026-12-01, f1e3209 |\n"
	for _, r := range []struct {
		name, targets, wantErr string
	}{
		{"ok/at or above its target", "attest=60 pki=90", ""},
		{"refuse/below its target: named, the document written all the same", "attest=90", "attest 60.0% < 90%"},
	} {
		t.Run(r.name, func(t *testing.T) {
			if err := os.WriteFile(docFile, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := run([]string{"-targets", r.targets, "-commit", "f1e3209", "-date", "2026-12-01", "-doc", docFile, res}, &out)
			if r.wantErr == "" && err != nil || r.wantErr != "" && (err == nil || !strings.Contains(err.Error(), r.wantErr)) {
				t.Fatalf("run: %v, want %q", err, r.wantErr)
			}
			row := strings.Replace(wantRow, "≥ 90%", "≥ "+strings.TrimPrefix(strings.Fields(r.targets)[0], "attest=")+"%", 1)
			if !strings.Contains(out.String(), row) {
				t.Errorf("output %s\nwant the row %s", out.String(), row)
			}
			if want := "attest: 2 lived\n  attest/a.go:12:20 CONDITIONALS_BOUNDARY\n  attest/b.go:2:11 CONDITIONALS_BOUNDARY\n"; !strings.Contains(out.String(), want) {
				t.Errorf("output %s\nwant the survivors by file, line and column:\n%s", out.String(), want)
			}
			got, err := os.ReadFile(docFile)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace(doc, "| attest | 1 | 1 | 0 | 0 | 0 | 50.0% | 100.0% | ≥ 90% | 2026-11-30, aaaaaaa |\n", row, 1)
			if string(got) != want {
				t.Errorf("document:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestWriteTableAddsNewPackages: a package the table has no row for is added after the others.
func TestWriteTableAddsNewPackages(t *testing.T) {
	got, err := writeTable([]byte(doc), map[string]string{"fleet": "| fleet | row |\n"}, []string{"fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "2026-11-30, aaaaaaa |\n| fleet | row |\n<!-- mutants: end -->") {
		t.Errorf("document:\n%s", got)
	}
	if _, err := writeTable([]byte("no markers"), nil, nil); err == nil {
		t.Error("a document without the markers was written")
	}
}

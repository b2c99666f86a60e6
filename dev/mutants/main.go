// Command mutants reads the results of gremlins (`make mutants`, scripts/mutants.sh), one JSON
// file per package named PACKAGE.json, and prints each package's figures and its surviving
// mutants. With -doc it writes the figures into the table of docs/testing.md between its two
// markers, replacing the rows of the packages measured and keeping the others (each row says
// when and on which commit it was measured). It fails when a package's efficacy is below its
// target.
//
//	go run ./dev/mutants -targets "attest=90 fleet=80" -commit abc1234 -date 2026-12-01 [-doc docs/testing.md] attest.json fleet.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The markers around the generated table of docs/testing.md.
const (
	beginMarker = "<!-- mutants: begin (make mutants writes this table) -->"
	endMarker   = "<!-- mutants: end -->"
)

const tableHeader = "| package | killed | lived | not covered | timed out | not viable | efficacy | mutant coverage | target | measured |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"

// result is the part of gremlins v0.6.0's JSON output (--output) read here. Its totals count a
// timed-out mutant nowhere, so every figure is counted again from the mutations.
type result struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// figures are one package's counts.
type figures struct {
	pkg                                            string
	killed, lived, notCovered, timedOut, notViable int
	survivors                                      []string // "file:line:column TYPE", sorted
}

// efficacy is gremlins' test efficacy: killed over killed and lived, in percent.
func (f figures) efficacy() float64 { return percent(f.killed, f.killed+f.lived) }

// coverage is gremlins' mutant coverage: killed and lived over those and the not covered.
func (f figures) coverage() float64 {
	return percent(f.killed+f.lived, f.killed+f.lived+f.notCovered)
}

func percent(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func read(path string) (figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return figures{}, err
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return figures{}, fmt.Errorf("read %s: %w", path, err)
	}
	f := figures{pkg: strings.TrimSuffix(filepath.Base(path), ".json")}
	for _, file := range r.Files {
		for _, m := range file.Mutations {
			switch m.Status {
			case "KILLED":
				f.killed++
			case "LIVED":
				f.lived++
				f.survivors = append(f.survivors, fmt.Sprintf("%s/%s:%d:%d %s", f.pkg, file.Name, m.Line, m.Column, m.Type))
			case "NOT COVERED":
				f.notCovered++
			case "TIMED OUT":
				f.timedOut++
			case "NOT VIABLE":
				f.notViable++
			default:
				return figures{}, fmt.Errorf("read %s: %s:%d: status %q of a finished run", path, file.Name, m.Line, m.Status)
			}
		}
	}
	slices.SortFunc(f.survivors, compareSurvivors)
	return f, nil
}

// compareSurvivors orders "file:line:column TYPE" by file, then line and column as numbers.
func compareSurvivors(a, b string) int {
	ka, kb := survivorKey(a), survivorKey(b)
	if c := strings.Compare(ka.file, kb.file); c != 0 {
		return c
	}
	if ka.line != kb.line {
		return ka.line - kb.line
	}
	if ka.col != kb.col {
		return ka.col - kb.col
	}
	return strings.Compare(a, b)
}

type key struct {
	file      string
	line, col int
}

func survivorKey(s string) key {
	pos, _, _ := strings.Cut(s, " ")
	parts := strings.Split(pos, ":")
	if len(parts) != 3 {
		return key{file: s}
	}
	line, _ := strconv.Atoi(parts[1])
	col, _ := strconv.Atoi(parts[2])
	return key{file: parts[0], line: line, col: col}
}

// parseTargets reads "attest=90 pki=90 fleet=80".
func parseTargets(s string) (map[string]float64, error) {
	t := map[string]float64{}
	for _, f := range strings.Fields(s) {
		pkg, v, ok := strings.Cut(f, "=")
		p, err := strconv.ParseFloat(v, 64)
		if !ok || pkg == "" || err != nil || p < 0 || p > 100 {
			return nil, fmt.Errorf("target %q: want PACKAGE=PERCENT", f)
		}
		t[pkg] = p
	}
	return t, nil
}

// row is the package's line of the table.
func row(f figures, target float64, hasTarget bool, date, commit string) string {
	goal := "—"
	if hasTarget {
		goal = fmt.Sprintf("≥ %g%%", target)
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %.1f%% | %.1f%% | %s | %s, %s |\n",
		f.pkg, f.killed, f.lived, f.notCovered, f.timedOut, f.notViable, f.efficacy(), f.coverage(), goal, date, commit)
}

// writeTable replaces the rows of the packages in rows (package → row) in the table between
// the markers of doc, keeping the other rows in their order and adding new packages at the end.
func writeTable(doc []byte, rows map[string]string, order []string) ([]byte, error) {
	begin := bytes.Index(doc, []byte(beginMarker))
	end := bytes.Index(doc, []byte(endMarker))
	if begin < 0 || end < begin {
		return nil, errors.New("the document has no table markers: " + beginMarker + " … " + endMarker)
	}
	var kept []string
	for _, line := range strings.Split(string(doc[begin+len(beginMarker):end]), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| package ") {
			continue
		}
		pkg := strings.TrimSpace(strings.Split(line, "|")[1])
		if r, ok := rows[pkg]; ok {
			kept = append(kept, r)
			delete(rows, pkg)
			continue
		}
		kept = append(kept, line+"\n")
	}
	for _, pkg := range order {
		if r, ok := rows[pkg]; ok {
			kept = append(kept, r)
		}
	}
	var b bytes.Buffer
	b.Write(doc[:begin+len(beginMarker)])
	b.WriteString("\n" + tableHeader + strings.Join(kept, ""))
	b.Write(doc[end:])
	return b.Bytes(), nil
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mutants", flag.ContinueOnError)
	targetsFlag := fs.String("targets", "", `each package's efficacy target, "attest=90 fleet=80"`)
	commit := fs.String("commit", "", "the commit measured (git describe)")
	date := fs.String("date", "", "the day measured, YYYY-MM-DD")
	doc := fs.String("doc", "", "the document whose table to write (docs/testing.md); none when empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 || *commit == "" || *date == "" {
		return errors.New("usage: mutants -commit C -date D [-targets T] [-doc FILE] PACKAGE.json...")
	}
	targets, err := parseTargets(*targetsFlag)
	if err != nil {
		return err
	}
	rows := map[string]string{}
	var order, short []string
	fmt.Fprint(stdout, "\n"+tableHeader)
	var lists strings.Builder
	for _, path := range fs.Args() {
		f, err := read(path)
		if err != nil {
			return err
		}
		target, has := targets[f.pkg]
		rows[f.pkg] = row(f, target, has, *date, *commit)
		order = append(order, f.pkg)
		fmt.Fprint(stdout, rows[f.pkg])
		if has && f.efficacy() < target {
			short = append(short, fmt.Sprintf("%s %.1f%% < %g%%", f.pkg, f.efficacy(), target))
		}
		if len(f.survivors) > 0 {
			fmt.Fprintf(&lists, "\n%s: %d lived\n  %s\n", f.pkg, len(f.survivors), strings.Join(f.survivors, "\n  "))
		}
	}
	fmt.Fprint(stdout, lists.String())
	if *doc != "" {
		b, err := os.ReadFile(*doc)
		if err != nil {
			return err
		}
		if b, err = writeTable(b, rows, order); err != nil {
			return fmt.Errorf("%s: %w", *doc, err)
		}
		if err := os.WriteFile(*doc, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote the rows of %s into %s\n", strings.Join(order, ", "), *doc)
	}
	if len(short) > 0 {
		return fmt.Errorf("efficacy below its target: %s (the lived mutants are listed above)", strings.Join(short, ", "))
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

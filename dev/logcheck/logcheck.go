// Package logcheck checks a log the way an operator's tools read it (docs/operate.md
// "Endpoints"): every line one JSON object, and no object with a key twice. encoding/json and jq
// keep the last of two equal keys without a word, so a repeated key silently loses a value; and a
// line that is not JSON stops `journalctl … | jq` there. The tests of the development stack feed it
// whole logs of fleetd and of the agent.
package logcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Problem is one line that a JSON reader would choke on or misread.
type Problem struct {
	Line int    // 1-based
	Text string // the line, cut to 300 bytes
	Why  string
}

func (p Problem) String() string { return fmt.Sprintf("line %d: %s: %s", p.Line, p.Why, p.Text) }

// Lines reads r to its end and returns every line that is not one JSON object, or whose object
// (at any depth) has a key twice. Empty lines count as problems too: jq skips them, a strict
// reader does not. It also returns how many lines it read.
func Lines(r io.Reader) ([]Problem, int, error) {
	var problems []Problem
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if why := check(line); why != "" {
			text := string(line)
			if len(text) > 300 {
				text = text[:300] + "…"
			}
			problems = append(problems, Problem{Line: n, Text: text, Why: why})
		}
	}
	return problems, n, sc.Err()
}

// check says what is wrong with one line, or "".
func check(line []byte) string {
	if len(bytes.TrimSpace(line)) == 0 {
		return "empty line"
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return "not a JSON object"
	}
	if why, err := object(dec, ""); err != nil {
		return "not JSON: " + err.Error()
	} else if why != "" {
		return why
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "more than one JSON value on the line"
	}
	return ""
}

// object reads the rest of an object whose '{' was read, and names the first repeated key.
func object(dec *json.Decoder, path string) (string, error) {
	seen := map[string]bool{}
	dup := ""
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		key, _ := tok.(string)
		if seen[key] && dup == "" {
			dup = "key " + strings.TrimPrefix(path+"."+key, ".") + " appears twice"
		}
		seen[key] = true
		why, err := value(dec, path+"."+key)
		if err != nil {
			return "", err
		}
		if dup == "" {
			dup = why
		}
	}
	_, err := dec.Token() // '}'
	return dup, err
}

// value reads one value and names a repeated key inside it.
func value(dec *json.Decoder, path string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		return object(dec, path)
	case json.Delim('['):
		dup := ""
		for dec.More() {
			why, err := value(dec, path+"[]")
			if err != nil {
				return "", err
			}
			if dup == "" {
				dup = why
			}
		}
		_, err := dec.Token() // ']'
		return dup, err
	}
	return "", nil
}

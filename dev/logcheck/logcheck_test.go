package logcheck

import (
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	rows := []struct {
		name, line, why string
	}{
		{"ok/flat", `{"level":"info","message":"decision","device":"a"}`, ""},
		{"ok/nested keys may repeat across objects", `{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":2}]}`, ""},
		{"refuse/a key twice", `{"device_id":2,"step":"claim","device_id":2}`, "key device_id appears twice"},
		{"refuse/a nested key twice", `{"a":[{"b":{"x":1,"x":2}}]}`, "key a[].b.x appears twice"},
		{"refuse/plain text", `2026/12/01 10:00:00 http: TLS handshake error from 127.0.0.1:5555: EOF`, "not a JSON object"},
		{"refuse/an array", `[1,2]`, "not a JSON object"},
		{"refuse/two objects", `{"a":1}{"b":2}`, "more than one JSON value on the line"},
		{"refuse/cut short", `{"a":1,"b":`, "not JSON: EOF"},
		{"refuse/empty", ``, "empty line"},
	}
	for _, r := range rows {
		problems, n, err := Lines(strings.NewReader(r.line + "\n"))
		if err != nil || n != 1 {
			t.Fatalf("%s: read %d lines: %v", r.name, n, err)
		}
		got := ""
		if len(problems) == 1 {
			got = problems[0].Why
		}
		if len(problems) > 1 || got != r.why {
			t.Errorf("%s: %v, want %q", r.name, problems, r.why)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAgentFailureLineIsJSON: a failed agent run ends its log with one JSON line that says why
// and with which exit code, so a Workflow's log or a node's journal is read by one JSON reader
// (the dev stack's log check refuses any other line).
func TestAgentFailureLineIsJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // in the error
		allJSON bool   // false where the flag package prints its usage for a person first
	}{
		{"enroll/unknown flag", []string{"enroll", "--no-such-flag"}, "no-such-flag", false},
		{"boot-check/unknown flag", []string{"boot-check", "--no-such-flag"}, "no-such-flag", false},
		{"boot-check/no node files", []string{"boot-check", "--fleetd-url", "https://127.0.0.1:1", "--dir", t.TempDir()}, "lak", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code == 0 {
				t.Fatalf("fleetd %v exited 0; stderr:\n%s", tc.args, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			for i, l := range lines {
				if tc.allJSON && !json.Valid([]byte(l)) {
					t.Errorf("stderr line %d is not JSON: %s", i+1, l)
				}
			}
			var last struct {
				Level    string `json:"level"`
				Cmd      string `json:"cmd"`
				Error    string `json:"error"`
				ExitCode int    `json:"exit_code"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
				t.Fatalf("last line: %v", err)
			}
			if last.Level != "error" || last.Cmd != tc.args[0] || last.Error == "" || last.ExitCode != code {
				t.Errorf("last line = %+v, want level error, cmd %s, an error and exit_code %d", last, tc.args[0], code)
			}
			if !strings.Contains(last.Error, tc.want) {
				t.Errorf("error %q does not name %q", last.Error, tc.want)
			}
		})
	}
}

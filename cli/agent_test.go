package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
		action  string // FLEETD_ACTION
		cmd     string // the command the last line names; default args[0]
		code    int    // the exit code; default any but 0
	}{
		{name: "enroll/unknown flag", args: []string{"enroll", "--no-such-flag"}, want: "no-such-flag"},
		{name: "boot-check/unknown flag", args: []string{"boot-check", "--no-such-flag"}, want: "no-such-flag"},
		{name: "boot-check/no node files", args: []string{"boot-check", "--fleetd-url", "https://127.0.0.1:1", "--dir", t.TempDir()}, want: "lak", allJSON: true},
		{name: "wipe-receipt/no receipt grant", args: []string{"wipe-receipt", "--fleetd-url", "https://127.0.0.1:1", "--workflow-dir", t.TempDir()},
			want: "receipt.json is missing", allJSON: true, code: 1},
		// The agent image's entrypoint is `fleetd enroll`: the receipt step reaches wipe-receipt
		// through FLEETD_ACTION, and a misspelt action is refused instead of enrolling again.
		{name: "enroll/as the receipt step", args: []string{"enroll", "--fleetd-url", "https://127.0.0.1:1", "--workflow-dir", t.TempDir()},
			action: "wipe-receipt", cmd: "wipe-receipt", want: "receipt.json is missing", allJSON: true, code: 1},
		{name: "talos-meta/no authorized disk", args: []string{"talos-meta", "--workflow-dir", t.TempDir()},
			want: "fleetd enroll authorized no disk", allJSON: true, code: 1},
		{name: "enroll/as the Talos META step", args: []string{"enroll", "--workflow-dir", t.TempDir()},
			action: "talos-meta", cmd: "talos-meta", want: "fleetd enroll authorized no disk", allJSON: true, code: 1},
		{name: "enroll/a misspelt action", args: []string{"enroll"}, action: "wipe_receipt", want: `FLEETD_ACTION="wipe_receipt"`, allJSON: true, code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLEETD_ACTION", tc.action)
			var stdout, stderr bytes.Buffer
			agent := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
				"enroll": Enroll, "boot-check": BootCheck, "wipe-receipt": WipeReceipt, "talos-meta": TalosMeta}[tc.args[0]]
			code := agent(context.Background(), tc.args[1:], &stdout, &stderr)
			if code == 0 || tc.code != 0 && code != tc.code {
				t.Fatalf("fleetd %v exited %d, want %d; stderr:\n%s", tc.args, code, tc.code, stderr.String())
			}
			if tc.cmd == "" {
				tc.cmd = tc.args[0]
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
			if last.Level != "error" || last.Cmd != tc.cmd || last.Error == "" || last.ExitCode != code {
				t.Errorf("last line = %+v, want level error, cmd %s, an error and exit_code %d", last, tc.cmd, code)
			}
			if !strings.Contains(last.Error, tc.want) {
				t.Errorf("error %q does not name %q", last.Error, tc.want)
			}
		})
	}
}

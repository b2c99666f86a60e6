package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// commands are every command of the binary, as a user types it, and a word of its usage.
var commands = []struct {
	args  []string
	usage string // in the usage: the command's own flag or argument
}{
	{[]string{"serve"}, "-listen-https"},
	{[]string{"check"}, "-skip-files"},
	{[]string{"enroll"}, "-device"},
	{[]string{"wipe-receipt"}, "-workflow-dir"},
	{[]string{"talos-meta"}, "-workflow-dir"},
	{[]string{"boot-check"}, "-install-only"},
	{[]string{"policy"}, "usage: fleetd policy learn"},
	{[]string{"policy", "learn"}, "-event-log"},
	{[]string{"plan"}, "-action"},
	{[]string{"inventory"}, "usage: fleetd inventory check"},
	{[]string{"inventory", "check"}, "-token-file"},
	{[]string{"version"}, "usage: fleetd version"},
}

// TestHelp: every command asked for its help prints its usage on standard output, nothing on
// standard error, and exits 0 (the flag package's own handling made it exit 2 with the usage on
// standard error, and the agents logged "flag: help requested" as their failure).
func TestHelp(t *testing.T) {
	for _, c := range commands {
		for _, help := range []string{"--help", "-h", "-help"} {
			args := append(append([]string{}, c.args...), help)
			t.Run("ok/"+strings.Join(args, " "), func(t *testing.T) {
				var out, errOut bytes.Buffer
				code := run(args, &out, &errOut)
				if code != 0 || !strings.Contains(out.String(), c.usage) || errOut.Len() != 0 {
					t.Errorf("fleetd %s: exit %d, want 0 with the usage (%q) on stdout and nothing on stderr\nstdout: %s\nstderr: %s",
						strings.Join(args, " "), code, c.usage, out.String(), errOut.String())
				}
			})
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 || !strings.Contains(out.String(), "usage: fleetd <command>") || errOut.Len() != 0 {
			t.Errorf("fleetd %s: exit %d, stdout %q, stderr %q; want 0 and the commands on stdout", args[0], code, out.String(), errOut.String())
		}
	}
}

// TestMisuse: a command given a flag it does not have, or an argument it does not take, says
// so on standard error with its usage, prints nothing on standard output, and exits 2.
func TestMisuse(t *testing.T) {
	for _, c := range commands {
		args := append(append([]string{}, c.args...), "--no-such-flag")
		t.Run("refuse/"+strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(args, &out, &errOut)
			if code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), "no-such-flag") {
				t.Errorf("fleetd %s: exit %d, want 2 with the problem on stderr and nothing on stdout\nstdout: %s\nstderr: %s",
					strings.Join(args, " "), code, out.String(), errOut.String())
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: fleetd <command>"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"serve", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"serve", "--debug-listen", "0.0.0.0:6060"}, `--debug-listen "0.0.0.0:6060" is not a loopback address`},
		{[]string{"serve", "--debug-listen", "spore:6060"}, `--debug-listen "spore:6060" is not a loopback address`},
		{[]string{"serve", "--debug-listen", "6060"}, `--debug-listen "6060" is not HOST:PORT`},
		{[]string{"check", "--config"}, "flag needs an argument: -config"},
		{[]string{"version", "1"}, `unexpected arguments ["1"]`},
		{[]string{"policy"}, "name the subcommand (learn)"},
		{[]string{"policy", "forget"}, `unknown subcommand "forget"`},
		{[]string{"policy", "learn", "--policy", "p.json"}, "--policy and --event-log are required"},
		{[]string{"plan"}, "name the device"},
		{[]string{"plan", "node-a", "node-b"}, `one device only, not also ["node-b"]`},
		{[]string{"plan", "--action"}, "flag needs an argument: -action"},
		{[]string{"inventory"}, "name the subcommand (check)"},
		{[]string{"inventory", "list"}, `unknown subcommand "list"`},
		{[]string{"enroll", "surplus"}, `unexpected arguments [\"surplus\"]`},
		{[]string{"wipe-receipt", "surplus"}, `unexpected arguments [\"surplus\"]`},
		{[]string{"talos-meta", "surplus"}, `unexpected arguments [\"surplus\"]`},
	} {
		t.Run("refuse/"+strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("fleetd %s: exit %d, want 2 and %q on stderr\nstdout: %s\nstderr: %s",
					strings.Join(tc.args, " "), code, tc.want, out.String(), errOut.String())
			}
		})
	}
}

// TestDebugListener: the debug listener serves Go's profiles on a loopback address, nothing else.
func TestDebugListener(t *testing.T) {
	srv, addr, err := startDebug("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for path, want := range map[string]int{"/debug/pprof/heap?debug=1": http.StatusOK, "/debug/pprof/goroutine?debug=1": http.StatusOK, "/metrics": http.StatusNotFound, "/v1/boot-check": http.StatusNotFound} {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the debug listener: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if _, _, err := startDebug("[::]:0"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("startDebug on every address: %v, want a refusal", err)
	}
}

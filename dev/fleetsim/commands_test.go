package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestWorkflowUsage: `fleetsim workflow` refuses, before it reads the stack, what it cannot do:
// a message with succeed (the message is a failing container's output), the newer Tinkerbell's
// state spelling (the stack's v0.12.2 programs write only theirs), a missing verb.
func TestWorkflowUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"refuse/message-with-succeed", []string{"extra-001", "succeed", "--message", "m"}, "--message is the failing action's output and goes with fail only"},
		{"refuse/new-spelling-is-gone", []string{"extra-001", "succeed", "--new-spelling"}, "flag provided but not defined: -new-spelling"},
		{"refuse/no-verb", []string{"extra-001"}, "usage: fleetsim workflow NAME succeed|fail"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// The state directory does not exist: a command that got as far as reading it
			// would fail with exit 1.
			code := workflow(context.Background(), t.TempDir()+"/none", tc.args, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 saying %q", code, stderr.String(), tc.want)
			}
		})
	}
}

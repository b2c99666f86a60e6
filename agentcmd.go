package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
)

// enroll is the HookOS agent, the first action of every Workflow (agent/README.md has its flags,
// environment and exit codes).
func enroll(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := agent.ParseEnrollArgs(args, os.Getenv, stderr)
	if err == nil {
		cfg.Log = zerolog.New(stderr).With().Timestamp().Str("cmd", "enroll").Logger()
		err = agent.Enroll(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, "fleetd enroll:", err)
	}
	return agent.ExitCode(err)
}

// bootCheck is the node's hourly boot check (docs/boot-checks.md has its flags and exit codes).
func bootCheck(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := agent.ParseBootCheckArgs(args, os.Getenv, stderr)
	if err == nil {
		cfg.Log = zerolog.New(stderr).With().Timestamp().Str("cmd", "boot-check").Logger()
		err = agent.BootCheck(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, "fleetd boot-check:", err)
	}
	return agent.ExitCode(err)
}

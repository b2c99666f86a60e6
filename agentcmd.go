package main

import (
	"context"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
)

// enroll is the HookOS agent, the first action of every Workflow (agent/README.md has its flags,
// environment and exit codes).
func enroll(ctx context.Context, args []string, stderr io.Writer) int {
	log := agentLog(stderr, "enroll")
	cfg, err := agent.ParseEnrollArgs(args, os.Getenv, stderr)
	if err == nil {
		cfg.Log = log
		err = agent.Enroll(ctx, cfg)
	}
	return agentExit(log, "enroll", err)
}

// bootCheck is the node's hourly boot check (docs/boot-checks.md has its flags and exit codes).
func bootCheck(ctx context.Context, args []string, stderr io.Writer) int {
	log := agentLog(stderr, "boot-check")
	cfg, err := agent.ParseBootCheckArgs(args, os.Getenv, stderr)
	if err == nil {
		cfg.Log = log
		err = agent.BootCheck(ctx, cfg)
	}
	return agentExit(log, "boot-check", err)
}

// agentLog is the agents' log: JSON lines on stderr, each naming the command, as fleetd serve's
// are, so that a node's journal or a Workflow's log is read by one JSON reader.
func agentLog(stderr io.Writer, cmd string) zerolog.Logger {
	return zerolog.New(stderr).With().Timestamp().Str("cmd", cmd).Logger()
}

// agentExit ends a run: a run that failed ends its log with one JSON line that says why
// ("error") and with which exit code, the same line whatever the failure (a bad flag, a refusal
// by fleetd, a TPM that does not answer).
func agentExit(log zerolog.Logger, cmd string, err error) int {
	code := agent.ExitCode(err)
	if err != nil {
		log.Error().Err(err).Int("exit_code", code).Msg("fleetd " + cmd + " failed")
	}
	return code
}

package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
)

// Enroll is the HookOS agent, the first action of every Workflow (agent/README.md has its flags,
// environment and exit codes). It is the agent image's entrypoint, so an action whose
// FLEETD_ACTION is wipe-receipt runs `fleetd wipe-receipt` through it, and one whose
// FLEETD_ACTION is talos-meta `fleetd talos-meta`; any other FLEETD_ACTION but enroll (or none)
// is refused, so a misspelt step fails loudly instead of enrolling.
func Enroll(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch a := os.Getenv(api.AgentActionEnv); a {
	case api.AgentActionWipeReceipt:
		return WipeReceipt(ctx, args, stdout, stderr)
	case api.AgentActionTalosMeta:
		return TalosMeta(ctx, args, stdout, stderr)
	case "", api.AgentActionEnroll:
	default:
		log := agentLog(stderr, "enroll")
		return agentExit(log, "enroll", &agent.UsageError{Msg: fmt.Sprintf("%s=%.40q: the agent runs %s, %s or %s",
			api.AgentActionEnv, a, api.AgentActionEnroll, api.AgentActionWipeReceipt, api.AgentActionTalosMeta)})
	}
	log := agentLog(stderr, "enroll")
	var usage bytes.Buffer
	cfg, err := agent.ParseEnrollArgs(args, os.Getenv, &usage)
	if code, done := agentUsage(err, &usage, stdout, stderr); done {
		return code
	}
	if err == nil {
		cfg.Log = log
		err = agent.Enroll(ctx, cfg)
	}
	return agentExit(log, "enroll", err)
}

// WipeReceipt sends a wipe's or a retirement's receipt after the erase (agent/README.md,
// docs/http.md "Wipe receipts").
func WipeReceipt(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := agentLog(stderr, "wipe-receipt")
	var usage bytes.Buffer
	cfg, err := agent.ParseWipeReceiptArgs(args, os.Getenv, &usage)
	if code, done := agentUsage(err, &usage, stdout, stderr); done {
		return code
	}
	if err == nil {
		cfg.Log = log
		err = agent.WipeReceipt(ctx, cfg)
	}
	return agentExit(log, "wipe-receipt", err)
}

// TalosMeta puts a Talos provision's fetch secret into the written disk's META, after the image
// write (agent/README.md, docs/operate.md "The Talos META step").
func TalosMeta(_ context.Context, args []string, stdout, stderr io.Writer) int {
	log := agentLog(stderr, "talos-meta")
	var usage bytes.Buffer
	cfg, err := agent.ParseTalosMetaArgs(args, os.Getenv, &usage)
	if code, done := agentUsage(err, &usage, stdout, stderr); done {
		return code
	}
	if err == nil {
		cfg.Log = log
		err = agent.TalosMeta(cfg)
	}
	return agentExit(log, "talos-meta", err)
}

// BootCheck is the node's hourly boot check (docs/boot-checks.md has its flags and exit codes).
func BootCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := agentLog(stderr, "boot-check")
	var usage bytes.Buffer
	cfg, err := agent.ParseBootCheckArgs(args, os.Getenv, &usage)
	if code, done := agentUsage(err, &usage, stdout, stderr); done {
		return code
	}
	if err == nil {
		cfg.Log = log
		err = agent.BootCheck(ctx, cfg)
	}
	return agentExit(log, "boot-check", err)
}

// agentUsage sends what the agent's flag parsing wrote: the usage asked for with -h or --help
// to stdout, and the run is over (0); a complaint to stderr, before the run's last line.
func agentUsage(err error, usage *bytes.Buffer, stdout, stderr io.Writer) (code int, done bool) {
	if errors.Is(err, flag.ErrHelp) {
		_, _ = stdout.Write(usage.Bytes())
		return 0, true
	}
	_, _ = stderr.Write(usage.Bytes())
	return 0, false
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

// Package runbooks_test runs the commands of the docs as written (docs/runbooks.md, the operator
// blocks of docs/operate.md and docs/http.md, the README) against a development stack of its own,
// the way an operator would type them into a shell: /bin/sh, with bin/fleetsim and the stack's
// stack.json, curl, jq and kubectl. A command's shown output must match and its exit status must
// be the one shown, so a doc that drifts from what fleetd does fails here, and so does a helper
// that hides a refusal. With -short no stack is started and the tests skip.
package runbooks_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/dev/stack"
)

var (
	testStack *stack.Stack
	workDir   string // the shell's working directory: bin/fleetd and bin/fleetsim are here
	root      string // the checkout, where the docs are
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runWithStack(m))
}

func runWithStack(m *testing.M) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "runbook tests:", err); return 1 }
	var err error
	if root, err = stack.FindRoot("."); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp("", "runbooks-test-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	workDir = tmp
	bin := filepath.Join(tmp, "bin")
	fleetd, err := stack.BuildFleetd(".", bin)
	if err != nil {
		return fail(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "fleetsim"), "./dev/fleetsim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("build fleetsim: %w\n%s", err, out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	testStack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(tmp, "state"), FleetdBinary: fleetd,
		ReconcileInterval: 5 * time.Second, Logger: zerolog.New(logw).Level(zerolog.WarnLevel).With().Timestamp().Logger()})
	if err != nil {
		return fail(fmt.Errorf("start the stack: %w", err))
	}
	code := m.Run()
	if problems, n, err := stack.LogProblems(testStack.Info()); err != nil || len(problems) > 0 || n == 0 {
		fmt.Fprintf(os.Stderr, "runbook tests: the run's log (%d lines, %v) has lines a JSON reader misreads:\n%s\n", n, err, strings.Join(problems, "\n"))
		code = 1
	}
	if code != 0 {
		b, _ := os.ReadFile(testStack.Info().Fleetd.Log)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fmt.Fprintf(os.Stderr, "fleetd's log, last lines:\n%s\n", strings.Join(lines[max(len(lines)-30, 0):], "\n"))
	}
	if err := testStack.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "runbook tests: stop the stack:", err)
	}
	return code
}

func needStack(t *testing.T) *stack.Stack {
	t.Helper()
	if testStack == nil {
		t.Skip("needs the development stack (not started with -short)")
	}
	for _, tool := range []string{"curl", "jq", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the docs' commands need it (make deps installs curl and jq; kubectl comes with the machine, see docs/design.md §8)", tool)
		}
	}
	return testStack
}

// shell runs script with /bin/sh in the work directory, with FLEETSIM_DIR naming the stack, and
// returns its output (stdout and stderr together) and exit status.
func shell(t *testing.T, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = workDir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + workDir, "FLEETSIM_DIR=" + testStack.Info().Dir, "LC_ALL=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run /bin/sh: %v", err)
	}
	return string(out), code
}

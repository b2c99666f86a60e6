package runbooks_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// readDeadline is how long a command that only reads (show, journal, kubectl get, …) is run again
// until its output is the one the doc shows, as an operator runs `show` again while a webhook is
// on its way. Commands that change something run once.
const readDeadline = 90 * time.Second

// devSetup is the development stack's setup block of docs/runbooks.md: its variables and helpers.
func devSetup(t *testing.T) string {
	t.Helper()
	for _, b := range docBlocks(t, filepath.Join(root, "docs", "runbooks.md")) {
		if len(b) > 0 && b[0].setup && !b[0].spore {
			var lines []string
			for _, c := range b {
				lines = append(lines, c.cmd)
			}
			return strings.Join(lines, "\n")
		}
	}
	t.Fatal("docs/runbooks.md has no ```sh block starting with \"# development stack:\"")
	return ""
}

// readOnly reports whether a command only reads, and may be run again.
func readOnly(cmd string) bool {
	f := strings.Fields(cmd)
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "show", "journal", "workflow", "kubectl":
		return true
	case "fd", "curl":
		return !strings.Contains(cmd, "-X ")
	}
	return false
}

// runDoc runs one doc command after setup and checks its output and exit status against the doc.
func runDoc(t *testing.T, setup string, c docCommand) {
	t.Helper()
	end := time.Now().Add(readDeadline)
	for {
		out, code := shell(t, setup+"\n"+c.cmd)
		ok, missing := matches(out, c.want)
		if c.exit == 0 && strings.Contains(out, "refused:") {
			ok, missing = false, "(no refusal)"
		}
		if ok && code == c.exit {
			return
		}
		if !readOnly(c.cmd) || time.Now().After(end) {
			t.Fatalf("%s: %s\nexit %d (the doc says %d); the doc's line %q is not in the output:\n%s",
				c.where(), c.cmd, code, c.exit, missing, out)
		}
		time.Sleep(time.Second)
	}
}

// TestRunbooks walks docs/runbooks.md from top to bottom against the stack, every command as
// written, each with the output and exit status the doc shows.
func TestRunbooks(t *testing.T) {
	needStack(t)
	setup := devSetup(t)
	ran := 0
	for _, b := range docBlocks(t, filepath.Join(root, "docs", "runbooks.md")) {
		for _, c := range b {
			if c.setup {
				continue
			}
			runDoc(t, setup, c)
			ran++
		}
	}
	if ran < 20 {
		t.Fatalf("ran %d commands of docs/runbooks.md; its blocks were not found", ran)
	}
}

// TestHelpersFailLoudly: every wrong input an operator makes with the runbooks' helpers ends in a
// non-zero exit status with NetBox's or fleetd's own words, and changes nothing: no request is
// taken, no Workflow created.
func TestHelpersFailLoudly(t *testing.T) {
	s := needStack(t)
	setup := devSetup(t)
	const badToken = "NT=0123456789abcdef0123456789abcdef01234567; "
	rows := []struct{ name, cmd, says string }{
		{"refuse/misspelt desired_action", `patch 3 '{"custom_fields": {"desired_action": "provison"}}'`,
			"refused: {\"__all__\":[\"Invalid value for custom field 'desired_action': Invalid choice (provison) for choice set fleet_desired_action.\"]}"},
		{"refuse/misspelt status", `patch 3 '{"status": "decomissioning"}'`, `refused: {"status":["\"decomissioning\" is not a valid choice."]}`},
		{"refuse/wrong NetBox token", badToken + `patch 3 '{"custom_fields": {"desired_action": "provision"}}'`, `refused: {"detail":"Invalid v1 token"}`},
		{"refuse/unknown device id", `patch 99 '{"custom_fields": {"desired_action": "provision"}}'`, `refused: {"detail":"No Device matches the given query."}`},
		{"refuse/journal with a wrong token", badToken + `journal 3`, `refused: {"detail":"Invalid v1 token"}`},
		{"refuse/show an unknown device", `show builder-9`, `refused: {…"error": "unknown_device",…`},
		{"refuse/show with a wrong operator token", `OT=wrong; show builder-1`, `refused: {…"error": "unauthorized",…`},
		{"refuse/workflow of an unknown device", `workflow builder-9`, `refused: {…"error": "unknown_device",…`},
		{"refuse/reconcile with a wrong operator token", `OT=wrong; fd -X POST "$FD/v1/devices/builder-1/reconcile"`, `refused: {…"error": "unauthorized",…`},
	}
	for _, r := range rows {
		out, code := shell(t, setup+"\n"+r.cmd)
		flat := strings.ReplaceAll(out, "\n", "")
		if ok, _ := matches(flat, []string{"…" + r.says + "…"}); code != 1 || !ok {
			t.Errorf("%s: %s\nexit %d, want 1 with %q:\n%s", r.name, r.cmd, code, r.says, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := s.Owner().Device(ctx, "builder-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Field("desired_action") != "" || d.Field("fleet_state") != "" || d.Field("fleet_request") != "" {
		t.Errorf("a refused input changed builder-1: desired_action %q fleet_state %q fleet_request %q",
			d.Field("desired_action"), d.Field("fleet_state"), d.Field("fleet_request"))
	}
	if wfs, err := stack.DeviceWorkflows(ctx, s.Kube(), s.Info().Namespace, s.DeviceID("builder-1")); err != nil || len(wfs) > 0 {
		t.Errorf("builder-1 has Workflows %v (%v) after refused inputs", wfs, err)
	}
}

// sporeOnly are the parts of the docs' commands that exist only on the real fleet, each with the
// stack's equivalent the test runs instead (the rest of the command runs as written).
var sporeOnly = map[string]string{
	"journalctl -u fleetd -o cat": `cat "$(jq -r .fleetd.log $S)"`, // the stack's fleetd logs to a file
	// fleetd plan reads the stack's fleetd.yaml, as root reads spore's (its operator token).
	"sudo fleetd plan --config /etc/fleetd/fleetd.yaml":            `bin/fleetd plan --config "$(jq -r .fleetd.config $S)"`,
	"sudo fleetd inventory check --config /etc/fleetd/fleetd.yaml": `bin/fleetd inventory check --config "$(jq -r .fleetd.config $S)"`,
}

// TestOperatorDocs runs the operator blocks of docs/operate.md and docs/http.md: each doc's "on
// spore" block (URL, CA, token, device) is swapped for the stack's (docs/runbooks.md's, and a
// device of the stack), and every other command runs as written, with sporeOnly's swaps.
func TestOperatorDocs(t *testing.T) {
	needStack(t)
	setup := devSetup(t) + "\nNAME=cp-1"
	for _, doc := range []string{"operate.md", "http.md"} {
		spore, ran := false, 0
		for _, b := range docBlocks(t, filepath.Join(root, "docs", doc)) {
			for _, c := range b {
				switch {
				case c.spore:
					spore = true
					continue
				case strings.HasPrefix(c.cmd, "fleetd check "):
					continue // TestFleetdCheckDoc
				}
				for from, to := range sporeOnly {
					c.cmd = strings.ReplaceAll(c.cmd, from, to)
				}
				if len(c.want) == 0 && c.exit == 0 {
					c.want = []string{"…"} // shows no output: it must succeed, with something to say
				}
				runDoc(t, setup, c)
				ran++
			}
		}
		if !spore || ran == 0 {
			t.Errorf("docs/%s: %d commands run, spore setup block found %v", doc, ran, spore)
		}
	}
}

// TestFleetdCheckDoc runs docs/operate.md's `fleetd check` line as written in a copy of what the
// infrastructure repo holds (the example fleetd.yaml, classes.json and boot-policy.json, netbox-webhooks.yaml),
// with fleetd on PATH.
func TestFleetdCheckDoc(t *testing.T) {
	needStack(t)
	var line string
	for _, b := range docBlocks(t, filepath.Join(root, "docs", "operate.md")) {
		for _, c := range b {
			if strings.HasPrefix(c.cmd, "fleetd check ") {
				line = c.cmd
			}
		}
	}
	if line == "" {
		t.Fatal("docs/operate.md shows no fleetd check command")
	}
	repo := t.TempDir()
	for from, to := range map[string]string{"examples/fleetd.yaml": "fleetd.yaml", "examples/classes.json": "classes.json", "netbox-webhooks.yaml": "netbox-webhooks.yaml",
		"examples/boot-policy.json": "boot-policy.json"} {
		b, err := os.ReadFile(filepath.Join(root, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The command's --templates directory: the example Templates, as an infrastructure repo keeps
	// its own (docs/operate.md, "The wipe receipt step").
	templates, err := filepath.Glob(filepath.Join(root, "examples", "tinkerbell", "*.yaml"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("examples/tinkerbell holds no Template: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "tinkerbell", "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, from := range templates {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "tinkerbell", "templates", filepath.Base(from)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := shell(t, `cd "`+repo+`" && PATH="`+filepath.Join(workDir, "bin")+`:$PATH" && `+line)
	if code != 0 || !strings.Contains(out, "fleetd check: ok") {
		t.Errorf("%s: exit %d:\n%s", line, code, out)
	}
}

// notRun are the README's commands this test does not run, with the reason.
var notRun = map[string]string{
	"make run":  "the stack this test starts is what make run starts (bin/fleetsim up)",
	"make test": "this test runs inside make test",
}

// TestREADMECommands: every command of the README's blocks is run by a test or listed in
// notRun with its reason, so a new one cannot go untried unnoticed.
func TestREADMECommands(t *testing.T) {
	needStack(t)
	for _, b := range docBlocks(t, filepath.Join(root, "README.md")) {
		for _, c := range b {
			cmd, _, _ := strings.Cut(c.cmd, "#")
			if _, ok := notRun[strings.TrimSpace(cmd)]; !ok {
				t.Errorf("%s: %q is neither run by a test nor listed in notRun", c.where(), c.cmd)
			}
		}
	}
}

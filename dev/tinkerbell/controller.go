package tinkerbell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Tool is the path of a binary scripts/tools.sh built into its cache (root: the fleetd
// checkout). A tool that is not built is an error saying to run `make tools`.
func Tool(root, name string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "scripts", "tools.sh"), "path", name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s is not built (run `make tools` in %s): %w: %s", name, root, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// ControllerOptions configure StartController.
type ControllerOptions struct {
	// Binary is tink-controller (Tool(root, "tink-controller")).
	Binary string
	// Kubeconfig is the API server's kubeconfig. tink-controller v0.12.2 reads it from
	// $KUBECONFIG only: its --kubeconfig flag is parsed but never used (cmd/tink-controller).
	Kubeconfig string
	// Namespace limits the controller's cache to one namespace; empty watches all of them.
	Namespace string
	// Log receives the controller's zap JSON log (appended).
	Log string
}

// Process is a running Tinkerbell program (tinkerbell, tink-agent; tink-controller, tink-server
// or tink-worker).
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the process's exit, set before done is closed
	once sync.Once
	stop error // Stop's result, the same on every call
	// ready is the log line that said the process was ready (tink-server's has its address): the
	// line of the first of the ready texts.
	ready string
}

// controllerReady is the line controller-runtime logs once the Workflow controller's cache has
// synced and it reconciles.
const controllerReady = `"msg":"Starting workers"`

// StartController starts tink-controller v0.12.2 against the API server, with leader election
// off (the harness serves no Leases), its debug log on, and no metrics or probe listeners (several stacks run on
// one machine), and returns once it reconciles Workflows. Its environment holds only what it
// needs: the controller reads its flags from any environment variable of the same name.
func StartController(ctx context.Context, o ControllerOptions) (*Process, error) {
	if o.Binary == "" || o.Kubeconfig == "" || o.Log == "" {
		return nil, errors.New("start tink-controller: Binary, Kubeconfig and Log are required")
	}
	// --log-level 1 logs each reconcile's journal, which WaitReconciled reads.
	args := []string{"--kubeconfig", o.Kubeconfig, "--leader-elect=false", "--log-level", "1",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	if o.Namespace != "" {
		args = append(args, "--namespace", o.Namespace)
	}
	return startProcess(ctx, "tink-controller", o.Binary, args, []string{"KUBECONFIG=" + o.Kubeconfig}, o.Log, controllerReady)
}

// startProcess starts a Tinkerbell program with only PATH, HOME and env in its environment (they
// read their flags from environment variables of the same name too), in the log's directory
// (where they find no config file), its output appended to log, and returns once the log shows
// every one of ready, within 60 s.
func startProcess(ctx context.Context, name, bin string, args, env []string, log string, ready ...string) (*Process, error) {
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: open its log: %w", name, err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, 2)
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + filepath.Dir(log)}, env...)
	cmd.Dir = filepath.Dir(log)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", name, bin, err)
	}
	p := &Process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(log); err == nil && int64(len(b)) > start {
			if line, ok := allLogged(b[start:], ready); ok {
				p.ready = line
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it was ready (%v); its log %s ends: %s", name, p.err, log, logTail(log))
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("start %s: %w", name, ctx.Err()), p.Stop())
		case <-deadline.C:
			return nil, errors.Join(fmt.Errorf("%s was not ready within 60 s; its log %s ends: %s", name, log, logTail(log)), p.Stop())
		case <-tick.C:
		}
	}
}

// allLogged says whether out holds every one of texts, and returns the line of the first.
func allLogged(out []byte, texts []string) (string, bool) {
	first := ""
	for n, text := range texts {
		i := bytes.Index(out, []byte(text))
		if i < 0 {
			return "", false
		}
		if n == 0 {
			line := out[i:]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			first = string(line)
		}
	}
	return first, true
}

// Log is the process's log file.
func (p *Process) Log() string { return p.log }

// Stop ends the process (SIGTERM, then SIGKILL after 30 s) and waits for it. It fails when the
// process ignored SIGTERM and had to be killed: a program that shuts down gracefully can take
// seconds on a loaded 2-core machine, one still running after 30 s did not. Stop is idempotent;
// later calls return the first result.
func (p *Process) Stop() error {
	p.once.Do(func() {
		// Signal fails only when the process has already exited, which the select sees.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill() // the same: a process that exited meanwhile needs no kill
			<-p.done
			p.stop = fmt.Errorf("stop %s: it ignored SIGTERM and was killed; its log %s ends: %s", p.name, p.log, logTail(p.log))
		}
	})
	return p.stop
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// prepareTimeout bounds how long WaitPrepared waits for the controller. Two minutes, not less: on
// the busy 2-core machine make test runs on, the controller once left a new Workflow unreconciled
// (state "") for 30 s while the stack ran dozens of others (TestRestartBetweenNetbootAndBoot); a
// controller that is not running is still reported, later.
const prepareTimeout = 2 * time.Minute

// prepareSettle is how long a prepared Workflow must stay unchanged before WaitPrepared returns.
// The controller (tink v0.12.2's and v0.25's alike) reconciles from its cache and writes status
// with a merge patch, which carries no resourceVersion: a reconcile that still saw the Workflow unprepared (its own write
// not yet in its cache, or a retry after "hardware not found") prepares it again and puts the
// Workflow back to PENDING over whatever a worker reported in between. The workflows tests
// found exactly that (a Workflow whose every action had succeeded read PENDING again).
const prepareSettle = 750 * time.Millisecond

// renderNudgeAfter is how long WaitPrepared lets a Workflow stay unrendered (state "") before it
// nudges tink-controller into a reconcile, and how long between nudges. The controller retries a
// Workflow whose Hardware or Template it could not read (its cache lags behind the writes) with
// controller-runtime's per-item backoff, 5 ms doubled at each failure: after ten seconds of
// failures its next try is ten seconds away, after twenty, twenty. A CI run of make test saw a
// Workflow of TestRestartBetweenNetbootAndBoot left "hardware not found" for the whole two
// minutes of prepareTimeout on the busy machine. A change to the Workflow queues it at once,
// past the backoff; a render takes the controller milliseconds, so two seconds unrendered is
// already a stall.
const renderNudgeAfter = 2 * time.Second

// WaitPrepared waits until the controller has rendered the Workflow and prepared its boot (tink
// v0.12.2's internal/deprecated/workflow reconciler, v0.25's tink/controller/internal/workflow):
// the state has left "" and PREPARING, or the preparation failed (a boot-job or allowPXE
// condition failed). wf is
// refreshed. A Template that does not render is an error saying why, as the controller's
// condition has it; a Workflow the controller leaves waiting is returned as it is, with no error,
// for the caller to judge. A Workflow left unrendered for renderNudgeAfter is nudged
// (nudgeWorkflow), and again after each renderNudgeAfter.
func WaitPrepared(ctx context.Context, c client.Client, wf *Workflow) error {
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	var settledAt string // the resourceVersion the prepared Workflow has held since settledSince
	var settledSince time.Time
	nudged := time.Now() // the last nudge, or the start: a Workflow gets renderNudgeAfter first
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("wait for Tinkerbell's controller to prepare Workflow %s: %w (is it running? see its log)", wf.Name, ctx.Err())
			}
			return fmt.Errorf("read Workflow %s: %w", wf.Name, err)
		}
		// A Template that does not render stays so; a Template or Hardware the controller could
		// not read yet is retried (its cache can lag behind the writes), so that is waited out.
		msg := conditionMessage(wf, tinkv1.TemplateRenderedSuccess)
		if wf.Rendering() == tinkv1.TemplateRenderingFailed && strings.HasPrefix(msg, "error rendering template") {
			return fmt.Errorf("Tinkerbell's controller could not render Workflow %s: %s", wf.Name, msg)
		}
		state := BareState(wf.Status.State)
		prepared := state != "" && state != "PREPARING" || state == "PREPARING" && preparationFailed(wf)
		// A failed nudge is not an error here: the next read says whether the Workflow is gone,
		// and the next nudge tries again.
		if wf.Status.State == "" && time.Since(nudged) >= renderNudgeAfter {
			_ = nudgeWorkflow(ctx, c, wf)
			nudged = time.Now()
		}
		switch {
		case !prepared:
			settledAt = ""
		case wf.ResourceVersion != settledAt:
			settledAt, settledSince = wf.ResourceVersion, time.Now()
		case time.Since(settledSince) >= prepareSettle:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Tinkerbell's controller did not prepare Workflow %s within %s (state %q, templateRendering %q: %s): is it running? see its log",
				wf.Name, prepareTimeout, wf.Status.State, wf.Rendering(), msg)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// preparationFailed says whether a PREPARING Workflow carries a failed preparation step
// (v0.12.2 names its boot job conditions NetbootJob*, v0.25 BootJob*).
func preparationFailed(wf *Workflow) bool {
	for _, cd := range wf.Status.Conditions {
		switch {
		case cd.Type == tinkv1.NetbootJobSetupFailed && cd.Status == metav1.ConditionTrue,
			cd.Type == tinkv1.NetbootJobFailed && cd.Status == metav1.ConditionTrue,
			cd.Type == "BootJobSetupFailed" && cd.Status == metav1.ConditionTrue,
			cd.Type == "BootJobFailed" && cd.Status == metav1.ConditionTrue,
			cd.Type == tinkv1.ToggleAllowNetbootTrue && cd.Status == metav1.ConditionFalse:
			return true
		}
	}
	return false
}

func conditionMessage(wf *Workflow, t tinkv1.WorkflowConditionType) string {
	for _, cd := range wf.Status.Conditions {
		if cd.Type == t {
			return cd.Message
		}
	}
	return "no " + string(t) + " condition"
}

package tinkerbell

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// WaitServable waits until a worker may be started on wf: tink-controller has prepared it
// (WaitPrepared) and its cache holds it prepared (WaitReconciled, which reads controllerLog), so
// that no reconcile renders it again under the worker. A Workflow that is not PENDING or RUNNING
// once prepared is refused: tink-server v0.12.2 serves a worker no other
// (internal/server/index.go, workflowByNonTerminalStateFunc), so its worker would wait for ever.
// wf is refreshed.
func WaitServable(ctx context.Context, c client.Client, wf *tinkv1.Workflow, controllerLog string) error {
	if err := WaitPrepared(ctx, c, wf); err != nil {
		return err
	}
	if s := BareState(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return fmt.Errorf("Workflow %s is %s once tink-controller prepared it: tink-server serves a worker only PENDING or RUNNING Workflows", wf.Name, wf.Status.State)
	}
	return WaitReconciled(ctx, controllerLog, wf, func(ctx context.Context) error { return nudgeWorkflow(ctx, c, wf) })
}

// nudgeAnnotation is the annotation nudgeWorkflow writes; nothing reads it.
const nudgeAnnotation = "fleetsim.folly-infra/nudged"

// nudgeWorkflow changes wf's metadata (nudgeAnnotation, the time) so that tink-controller,
// which reconciles a Workflow on every change (it sets no predicate), reconciles it again. It
// touches neither spec nor status.
func nudgeWorkflow(ctx context.Context, c client.Client, wf *tinkv1.Workflow) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nudgeAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	obj := &tinkv1.Workflow{}
	obj.Name, obj.Namespace = wf.Name, wf.Namespace
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// RunOptions configure RunWorker.
type RunOptions struct {
	// Worker is the tink-worker binary, Server tink-server's gRPC address, ID the worker id (the
	// MAC the Workflow's hardwareMap names).
	Worker, Server, ID string
	// Run runs the worker's containers (dev/dockerapi).
	Run dockerapi.Runner
	// Stop, when set, is asked with every read of the Workflow whether to stop before it ends.
	Stop func(*tinkv1.Workflow) bool
	// Log receives the worker's and its Docker API's log (appended); ControllerLog is
	// tink-controller's, named in errors.
	Log, ControllerLog string
}

// RunWorker is a netbooting machine's HookOS for one Workflow, once WaitServable has returned: a
// Docker Engine API (dev/dockerapi) whose containers o.Run runs, and tink-worker v0.12.2 with id
// o.ID asking tink-server for work through it. It returns once wf (refreshed) has ended or o.Stop
// says so, and stops both: a worker runs only while its machine netboots, so that a large fleet
// does not poll tink-server. A Workflow reset under the worker (an action seen started PENDING
// again) is an error saying so.
//
// o.Run sees only wf's containers. tink-server serves a worker every PENDING or RUNNING Workflow
// of its id, and tink-worker runs them one after another (cmd/tink-worker/worker
// ProcessWorkflowActions), while o.Run answers for wf alone: a container of another Workflow is
// left where the worker put it (its action RUNNING, as on a machine switched off), and, when wf
// has not ended, RunWorker stops the worker and fails naming that Workflow.
func RunWorker(ctx context.Context, c client.Client, wf *tinkv1.Workflow, o RunOptions) error {
	// A unix socket path is at most 107 bytes; the log's directory may be deeper than that.
	sockDir, err := os.MkdirTemp("", "tink-worker-docker-")
	if err != nil {
		return fmt.Errorf("make the Docker API's directory: %w", err)
	}
	defer os.RemoveAll(sockDir)
	lf, err := os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the worker's log: %w", err)
	}
	defer lf.Close()
	own := newOwnContainers(wf, o.Run)
	engine, err := dockerapi.Start(filepath.Join(sockDir, "docker.sock"), own.run, zerolog.New(lf).With().Timestamp().Str("component", "dockerapi").Logger())
	if err != nil {
		return err
	}
	defer engine.Close()
	worker, err := StartWorker(ctx, WorkerOptions{Binary: o.Worker, ID: o.ID, Server: o.Server, DockerHost: engine.Host(), Log: o.Log})
	if err != nil {
		return err
	}
	defer worker.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	started := map[string]string{} // action -> the state it was seen in once it had started
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err == nil {
			if err := notReset(wf, started); err != nil {
				return fmt.Errorf("%w; see tink-controller's log %s and the worker's log %s", err, o.ControllerLog, o.Log)
			}
			if Ended(wf) || (o.Stop != nil && o.Stop(wf)) {
				return nil
			}
			if err := own.err(); err != nil {
				return fmt.Errorf("%w; see the worker's log %s", err, o.Log)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Workflow %s did not end (state %s, action %s): %w; see the worker's log %s", wf.Name, wf.Status.State, wf.Status.CurrentAction, ctx.Err(), o.Log)
		case <-worker.Done():
			return fmt.Errorf("tink-worker exited while Workflow %s ran; see its log %s", wf.Name, o.Log)
		case <-tick.C:
		}
	}
}

// Ended says whether a Workflow reached an end state.
func Ended(wf *tinkv1.Workflow) bool {
	switch BareState(wf.Status.State) {
	case "SUCCESS", "FAILED", "TIMEOUT":
		return true
	}
	return false
}

// notReset fails when an action seen started (in started, which it updates) is PENDING again:
// tink-controller rendered the Workflow again under the running worker, which then retries a
// report tink-server refuses for ever (WaitReconciled says why).
func notReset(wf *tinkv1.Workflow, started map[string]string) error {
	for _, a := range Actions(wf) {
		s := BareState(a.State)
		if was, ok := started[a.Name]; ok && s == "PENDING" {
			return fmt.Errorf("Workflow %s was reset under its running worker: action %s went from %s back to PENDING (tink-controller rendered it again)", wf.Name, a.Name, was)
		}
		if s != "" && s != "PENDING" {
			started[a.Name] = s
		}
	}
	return nil
}

// BareState is a state without tink v0.12's STATE_ prefix, for comparisons ("SUCCESS" for
// STATE_SUCCESS and for the newer Tinkerbell's SUCCESS alike).
func BareState(s tinkv1.WorkflowState) string { return strings.TrimPrefix(string(s), "STATE_") }

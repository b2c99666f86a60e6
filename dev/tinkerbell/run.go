package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// WaitServable waits until a worker may be started on wf: the controller has prepared it
// (WaitPrepared) and its cache holds it prepared (WaitReconciled, which reads controllerLog), so
// that no reconcile renders it again under the worker. A Workflow that is not PENDING or RUNNING
// once prepared is refused: neither tink-server v0.12.2 (internal/server/index.go,
// workflowByNonTerminalStateFunc) nor v0.25's server (tink/server/internal/grpc) serves a worker
// any other, so its worker would wait for ever. wf is refreshed.
func WaitServable(ctx context.Context, c client.Client, wf *Workflow, controllerLog string) error {
	if err := WaitPrepared(ctx, c, wf); err != nil {
		return err
	}
	if s := BareState(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return fmt.Errorf("Workflow %s is %s once the controller prepared it: Tinkerbell's server serves a worker only PENDING or RUNNING Workflows", wf.Name, BareState(wf.Status.State))
	}
	return WaitReconciled(ctx, controllerLog, wf, func(ctx context.Context) error { return nudgeWorkflow(ctx, c, wf) })
}

// nudgeAnnotation is the annotation nudgeWorkflow writes; nothing reads it.
const nudgeAnnotation = "fleetsim.folly-infra/nudged"

// nudgeWorkflow changes wf's metadata (nudgeAnnotation, the time) so that the controller, which
// reconciles a Workflow on every change (neither version sets a predicate), reconciles it again.
// It touches neither spec nor status.
func nudgeWorkflow(ctx context.Context, c client.Client, wf *Workflow) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nudgeAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	obj := &Workflow{}
	obj.Name, obj.Namespace = wf.Name, wf.Namespace
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// RunOptions configure RunWorker.
type RunOptions struct {
	// Version is the Tinkerbell the server is (default V025): it decides the worker program,
	// tink-agent or tink-worker.
	Version Version
	// Worker is the worker binary (Tinkerbell.Worker), Server the server's gRPC address, ID the
	// worker id (the MAC the Workflow's hardwareMap names).
	Worker, Server, ID string
	// Run runs the worker's containers (dev/dockerapi).
	Run dockerapi.Runner
	// Stop, when set, is asked with every read of the Workflow whether to stop before it ends.
	Stop func(*Workflow) bool
	// Log receives the worker's and its Docker API's log (appended); ControllerLog is the
	// controller's, named in errors.
	Log, ControllerLog string
}

// RunWorker is a netbooting machine's HookOS for one Workflow, once WaitServable has returned: a
// Docker Engine API (dev/dockerapi) whose containers o.Run runs, and the version's worker with id
// o.ID asking the server for work through it (tink-agent v0.25 with its docker runtime, or
// tink-worker v0.12.2). It returns once wf (refreshed) has ended or o.Stop says so, and stops
// both: a worker runs only while its machine netboots, so that a large fleet does not poll the
// server. A Workflow reset under the worker (an action seen started PENDING again) is an error
// saying so.
//
// o.Run sees only wf's containers. The server serves a worker every PENDING or RUNNING Workflow
// of its id, one after another (tink-worker v0.12.2's ProcessWorkflowActions; v0.25's server
// serves the first it lists), while o.Run answers for wf alone: a container of another Workflow
// is left where the worker put it (its action RUNNING, as on a machine switched off), and, when
// wf has not ended, RunWorker stops the worker and fails naming that Workflow.
func RunWorker(ctx context.Context, c client.Client, wf *Workflow, o RunOptions) (err error) {
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
	own := newOwnContainers(wf, o.Version, func(actionID string) string { return workflowOfAction(ctx, c, wf.Namespace, actionID) }, o.Run)
	socket := filepath.Join(sockDir, "docker.sock")
	engine, err := dockerapi.Start(socket, own.run, zerolog.New(lf).With().Timestamp().Str("component", "dockerapi").Logger())
	if err != nil {
		return err
	}
	defer engine.Close()
	var worker *Process
	if o.Version == V012 {
		worker, err = StartWorker(ctx, WorkerOptions{Binary: o.Worker, ID: o.ID, Server: o.Server, DockerHost: engine.Host(), Log: o.Log})
	} else {
		worker, err = StartAgent(ctx, AgentOptions{Binary: o.Worker, ID: o.ID, Server: o.Server, DockerSocket: socket, Log: o.Log})
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Stop()) }()
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
			return fmt.Errorf("Workflow %s did not end (state %s, action %s): %w; see the worker's log %s", wf.Name, wf.Status.State, wf.CurrentAction(), ctx.Err(), o.Log)
		case <-worker.Done():
			return fmt.Errorf("%s exited while Workflow %s ran; see its log %s", worker.name, wf.Name, o.Log)
		case <-tick.C:
		}
	}
}

// Ended says whether a Workflow reached an end state.
func Ended(wf *Workflow) bool {
	switch BareState(wf.Status.State) {
	case "SUCCESS", "FAILED", "TIMEOUT":
		return true
	}
	return false
}

// notReset fails when an action seen started (in started, which it updates) is PENDING again:
// the controller rendered the Workflow again under the running worker, which then retries a
// report the server refuses for ever (WaitReconciled says why).
func notReset(wf *Workflow, started map[string]string) error {
	for _, a := range Actions(wf) {
		s := BareState(a.State)
		if was, ok := started[a.Name]; ok && s == "PENDING" {
			return fmt.Errorf("Workflow %s was reset under its running worker: action %s went from %s back to PENDING (the controller rendered it again)", wf.Name, a.Name, was)
		}
		if s != "" && s != "PENDING" {
			started[a.Name] = s
		}
	}
	return nil
}

// workflowOfAction is the namespace/name of the Workflow in namespace that has an action with id
// (v0.25), or "" when none has or the Workflows cannot be listed.
func workflowOfAction(ctx context.Context, c client.Client, namespace, id string) string {
	var list WorkflowList
	if c.List(ctx, &list, client.InNamespace(namespace)) != nil {
		return ""
	}
	for i := range list.Items {
		for _, a := range Actions(&list.Items[i]) {
			if a.ID == id {
				return namespace + "/" + list.Items[i].Name
			}
		}
	}
	return ""
}

package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// Netboot is `fleetsim machine NAME netboot` (docs/design.md §8): the machine boots HookOS and
// Tinkerbell's own tink-worker (its id the machine's MAC) runs, only while the machine netboots,
// the Workflow tink-server serves it, once tink-controller has rendered and prepared it: the
// worker reports each action to tink-server and runs its container through the machine's Docker
// API (dev/dockerapi), whose containers are the machine's actions. The first action is the real
// `fleetd enroll` against the machine's swtpm; the others are simulated by image, each writing
// what it did into the machine's log. It returns nil when the Workflow succeeded, and the failing
// action's error otherwise (an *ActionError: the Workflow is then failed, as Tinkerbell has it).
func Netboot(ctx context.Context, info Info, name string, o StepOptions) error {
	mc, err := openMachine(info, name, "netboot", o.Out)
	if err != nil {
		return err
	}
	defer mc.close()
	kc, err := KubeClient(info.Kubeconfig)
	if err != nil {
		return err
	}
	// The worker id is the MAC the machine netboots from: its network card's, which is the one
	// NetBox declares until the card is replaced (SetMAC).
	worker := mc.m
	if worker.MAC != "" {
		if worker.MAC, err = MachineMAC(mc.m); err != nil {
			return fmt.Errorf("netboot %s: %w", name, err)
		}
	}
	wf, err := MachineWorkflow(ctx, kc, info.Namespace, worker)
	if err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if err := tinkerbell.WaitPrepared(ctx, kc, wf); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if s := bareState(wf.Status.State); s != "PENDING" && s != "RUNNING" {
		return fmt.Errorf("netboot %s: Workflow %s is %s after tink-controller prepared it; the worker gets only PENDING or RUNNING Workflows", name, wf.Name, wf.Status.State)
	}
	// The worker starts only once tink-controller's cache holds the prepared Workflow: a
	// reconcile that still read it unprepared would render it again over the worker's reports.
	if err := tinkerbell.WaitReconciled(ctx, info.Tinkerbell.ControllerLog, wf); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if err := mc.useWorkflowDir(wf.Name); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	mc.say("HookOS booted; worker %s runs Workflow %s (Template %s)", worker.MAC, wf.Name, wf.Spec.TemplateRef)
	tpm, eventLog, err := mc.powerOn(ctx, o.EventLog)
	if err != nil {
		return err
	}
	defer tpm.Stop()
	// The actions run on the engine's goroutines while runWorker reads the Workflow into wf:
	// they get the Workflow as the worker was started on it, a copy of their own.
	rendered := wf.DeepCopy()
	actions := map[string]tinkerbell.Action{}
	for _, a := range tinkerbell.Actions(rendered) {
		actions[tinkerbell.ContainerName(a.Name)] = a
	}
	var mu sync.Mutex
	var failed *ActionError
	run := func(cctx context.Context, c dockerapi.Container) (string, int) {
		a, ok := actions[c.Name]
		if !ok {
			return fmt.Sprintf("fleetsim: container %s is no action of Workflow %s\n", c.Name, rendered.Name), 1
		}
		a.Env = c.EnvMap() // what the worker passed, the task's and the action's environment merged
		mc.say("action %s (%s) RUNNING", a.Name, a.Image)
		actx := cctx
		if a.Timeout > 0 {
			var cancel context.CancelFunc
			actx, cancel = context.WithTimeout(cctx, a.Timeout)
			defer cancel()
		}
		msg, err := mc.runAction(actx, rendered, a, tpm, eventLog)
		state, code := "SUCCESS", 0
		switch {
		case errors.Is(actx.Err(), context.DeadlineExceeded):
			state, msg, code = "TIMEOUT", fmt.Sprintf("the action ran longer than its timeout of %s", a.Timeout), 124
		case err != nil:
			state, msg, code = "FAILED", err.Error(), 1
		}
		mc.say("action %s %s: %s", a.Name, state, msg)
		if code != 0 {
			mu.Lock()
			failed = &ActionError{Action: a.Name, State: state, Message: msg}
			mu.Unlock()
		}
		return msg + "\n", code
	}
	if err := runWorker(ctx, mc.info, kc, wf, mc.m.MAC, mc.path(MachineWorkerLog), run, nil); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := bareState(wf.Status.State); s != "SUCCESS" {
		if failed == nil {
			failed = &ActionError{Action: wf.Status.CurrentAction, State: s, Message: "see the worker's log " + mc.path(MachineWorkerLog)}
		}
		return fmt.Errorf("netboot %s: %w", mc.name, failed)
	}
	mc.say("Workflow %s is %s", wf.Name, wf.Status.State)
	return nil
}

// workflowEnded says whether a Workflow reached an end state.
func workflowEnded(wf *tinkv1.Workflow) bool {
	switch bareState(wf.Status.State) {
	case "SUCCESS", "FAILED", "TIMEOUT":
		return true
	}
	return false
}

// runWorker is a machine's HookOS for one Workflow: a Docker Engine API (dev/dockerapi) whose
// containers run, and Tinkerbell's own tink-worker with the machine's MAC as its worker id,
// asking the stack's tink-server for work. It returns once wf (refreshed) has ended, or once
// stop (when set) says so, and stops both: a worker runs only while its machine netboots, so
// that a large fleet does not poll tink-server. The worker's and the engine's logs go to log.
func runWorker(ctx context.Context, info Info, kc client.Client, wf *tinkv1.Workflow, mac, log string, run dockerapi.Runner, stop func(*tinkv1.Workflow) bool) error {
	if info.Tinkerbell.Server == "" || info.Tinkerbell.Worker == "" {
		return errors.New("stack.json has no tinkerbell server or worker: the stack was started by an older fleetsim; stop it and start it again")
	}
	// A unix socket path is at most 107 bytes; the state directory may be deeper than that.
	sockDir, err := os.MkdirTemp("", "fleetsim-docker-")
	if err != nil {
		return fmt.Errorf("make the Docker API's directory: %w", err)
	}
	defer os.RemoveAll(sockDir)
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the worker's log: %w", err)
	}
	defer lf.Close()
	engine, err := dockerapi.Start(filepath.Join(sockDir, "docker.sock"), run, zerolog.New(lf).With().Timestamp().Str("component", "dockerapi").Logger())
	if err != nil {
		return err
	}
	defer engine.Close()
	worker, err := tinkerbell.StartWorker(ctx, tinkerbell.WorkerOptions{Binary: info.Tinkerbell.Worker, ID: mac,
		Server: info.Tinkerbell.Server, DockerHost: engine.Host(), Log: log})
	if err != nil {
		return err
	}
	defer worker.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	started := map[string]string{} // action -> the state it was seen in once it had started
	for {
		if err := kc.Get(ctx, client.ObjectKeyFromObject(wf), wf); err == nil {
			if err := notReset(wf, started); err != nil {
				return fmt.Errorf("%w; see tink-controller's log %s and the worker's log %s", err, info.Tinkerbell.ControllerLog, log)
			}
			if workflowEnded(wf) || (stop != nil && stop(wf)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Workflow %s did not end (state %s, action %s): %w; see the worker's log %s", wf.Name, wf.Status.State, wf.Status.CurrentAction, ctx.Err(), log)
		case <-worker.Done():
			return fmt.Errorf("tink-worker exited while Workflow %s ran; see its log %s", wf.Name, log)
		case <-tick.C:
		}
	}
}

// notReset fails when an action seen started (in started, which it updates) is PENDING again:
// tink-controller rendered the Workflow again under the running worker, which then retries a
// report tink-server refuses forever (dev/tinkerbell.WaitReconciled says why).
func notReset(wf *tinkv1.Workflow, started map[string]string) error {
	for _, a := range tinkerbell.Actions(wf) {
		s := bareState(a.State)
		if was, ok := started[a.Name]; ok && s == "PENDING" {
			return fmt.Errorf("Workflow %s was reset under its running worker: action %s went from %s back to PENDING (tink-controller rendered it again)", wf.Name, a.Name, was)
		}
		if s != "" && s != "PENDING" {
			started[a.Name] = s
		}
	}
	return nil
}

// ActionError is a netboot whose worker ran the Workflow and one of its actions ended FAILED or
// TIMEOUT (a refused enrollment is one): the machine did netboot, the Workflow did not succeed.
type ActionError struct {
	Action, State, Message string
}

func (e *ActionError) Error() string {
	return fmt.Sprintf("action %s %s: %s", e.Action, e.State, e.Message)
}

// MachineWorkflow finds the Workflow a worker with this MAC is served: the oldest one whose
// hardwareMap device_1 is the MAC and that has not ended. Tinkerbell finds it through an index;
// the stack looks first among the Workflows fleetd labelled with the machine's device id (one
// small List), and reads every Workflow of the namespace only when none of those is open, so
// that a netboot does not cost a List of the whole fleet's Workflows.
func MachineWorkflow(ctx context.Context, c client.Client, namespace string, m Machine) (*tinkv1.Workflow, error) {
	if m.MAC == "" {
		return nil, errors.New("the machine has no MAC in NetBox, so no worker id: Tinkerbell serves it nothing")
	}
	for _, opts := range [][]client.ListOption{
		{client.InNamespace(namespace), client.MatchingLabels{workflows.LabelDeviceID: strconv.FormatInt(m.DeviceID, 10)}},
		{client.InNamespace(namespace)},
	} {
		var list tinkv1.WorkflowList
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("list Workflows: %w", err)
		}
		if open := openFor(list.Items, m.MAC); len(open) > 0 {
			return &open[0], nil
		}
	}
	return nil, fmt.Errorf("%w for worker %s: no Workflow waits for this machine; ask for an action in NetBox and let fleetd accept it first", ErrNoWorkflow, m.MAC)
}

// openFor is the Workflows for a worker's MAC that have not ended, oldest first.
func openFor(wfs []tinkv1.Workflow, mac string) []tinkv1.Workflow {
	var open []tinkv1.Workflow
	for _, wf := range wfs {
		s := bareState(wf.Status.State)
		if wf.Spec.HardwareMap[workflows.MapMAC] == mac && (s == "" || s == "PREPARING" || s == "PENDING" || s == "RUNNING") {
			open = append(open, wf)
		}
	}
	sortByCreation(open)
	return open
}

// workflowMarker, in a machine's workflow directory, names the Workflow the directory belongs to.
const workflowMarker = ".workflow"

// useWorkflowDir gives a Workflow its own shared directory, as tink-worker mounts a directory of
// its own at /workflow for each Workflow: the directory of another Workflow is emptied first, and
// a resumed Workflow keeps what its earlier actions wrote.
func (mc *machine) useWorkflowDir(name string) error {
	dir := mc.path(MachineWorkflowDir)
	if b, err := os.ReadFile(filepath.Join(dir, workflowMarker)); err == nil && strings.TrimSpace(string(b)) == name {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("empty the workflow directory for Workflow %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the workflow directory for Workflow %s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(dir, workflowMarker), []byte(name+"\n"), 0o600)
}

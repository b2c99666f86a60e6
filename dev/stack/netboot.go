package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// Netboot is `fleetsim machine NAME netboot` (docs/design.md §8): the machine boots HookOS and
// Tinkerbell's own worker (tink-agent v0.25, or tink-worker v0.12.2; its id the machine's MAC)
// runs, only while the machine netboots, the Workflow Tinkerbell's server serves it, once the
// controller has rendered and prepared it: the worker reports each action to the server and
// runs its container through the machine's Docker API (dev/dockerapi), whose containers are the
// machine's actions. The first action is the real `fleetd enroll` against the machine's swtpm;
// the others are simulated by image, each writing what it did into the machine's log. An action
// sees the files earlier actions left only through a bind of its container (workflowDir), as on
// hardware. It returns nil when the Workflow succeeded, and the failing action's error otherwise
// (an *ActionError: the Workflow is then failed, as Tinkerbell has it). The actions o.Forge names
// are not run: their containers exit 0 at once (a forged completion).
//
// The machine answers for one Workflow, while the server serves its worker every open one of its
// MAC: a netboot that finds another open beside it is refused before the machine powers on,
// naming both (onlyOpenWorkflow), and a container of a Workflow it did not find (one of another
// device's or none, or opened during the netboot) is not run as the machine's action
// (tinkerbell.RunWorker).
func Netboot(ctx context.Context, info Info, name string, o StepOptions) (err error) {
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
	open, err := machineWorkflows(ctx, kc, info.Namespace, worker)
	if err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	wf := &open[0]
	if err := onlyOpenWorkflow(wf, open); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	if err := tinkerbell.WaitServable(ctx, kc, wf, info.Tinkerbell.ControllerLog); err != nil {
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
	defer func() { err = errors.Join(err, tpm.Stop()) }()
	// The actions run on the engine's goroutines while runWorker reads the Workflow into wf:
	// they get the Workflow as the worker was started on it, a copy of their own.
	rendered := wf.DeepCopy()
	version := info.Tinkerbell.version()
	actions := map[string]tinkerbell.Action{}
	for _, a := range tinkerbell.Actions(rendered) {
		actions[version.Container(a)] = a
	}
	var mu sync.Mutex
	var failed *ActionError
	run := func(cctx context.Context, c dockerapi.Container) (string, int) {
		a, ok := actions[c.Name]
		if !ok {
			return fmt.Sprintf("fleetsim: container %s is no action of Workflow %s\n", c.Name, rendered.Name), 1
		}
		if slices.Contains(o.Forge, a.Name) {
			mc.say("action %s (%s) FORGED: its container exits 0 without running", a.Name, a.Image)
			return fmt.Sprintf("fleetsim: action %s forged: exited 0 without running\n", a.Name), 0
		}
		a.Env = c.EnvMap() // what the worker passed, the task's and the action's environment merged
		dir, done, err := mc.workflowDir(c, a.Env["FLEETD_WORKFLOW_DIR"])
		if err != nil {
			return fmt.Sprintf("fleetsim: the workflow directory of container %s: %v\n", c.Name, err), 1
		}
		defer done()
		a.Env["FLEETD_WORKFLOW_DIR"] = dir
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
	if err := runWorker(ctx, mc.info, kc, wf, tinkerbell.RunOptions{ID: mc.m.MAC, Log: mc.path(MachineWorkerLog), Run: run}); err != nil {
		return fmt.Errorf("netboot %s: %w", name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := tinkerbell.BareState(wf.Status.State); s != "SUCCESS" {
		if failed == nil {
			failed = &ActionError{Action: wf.CurrentAction(), State: s, Message: "see the worker's log " + mc.path(MachineWorkerLog)}
		}
		return fmt.Errorf("netboot %s: %w", mc.name, failed)
	}
	mc.say("Workflow %s is %s", wf.Name, wf.Status.State)
	return nil
}

// runWorker runs the machine's HookOS for wf (tinkerbell.RunWorker) with the stack's Tinkerbell
// server and worker binary; o names the rest.
func runWorker(ctx context.Context, info Info, kc client.Client, wf *tinkerbell.Workflow, o tinkerbell.RunOptions) error {
	if info.Tinkerbell.Server == "" || info.Tinkerbell.Worker == "" {
		return errors.New("stack.json has no tinkerbell server or worker: the stack was started by an older fleetsim; stop it and start it again")
	}
	o.Version, o.Worker, o.Server, o.ControllerLog = info.Tinkerbell.version(), info.Tinkerbell.Worker, info.Tinkerbell.Server, info.Tinkerbell.ControllerLog
	return tinkerbell.RunWorker(ctx, kc, wf, o)
}

// ActionError is a netboot whose worker ran the Workflow and one of its actions ended FAILED or
// TIMEOUT (a refused enrollment is one): the machine did netboot, the Workflow did not succeed.
type ActionError struct {
	Action, State, Message string
}

func (e *ActionError) Error() string {
	return fmt.Sprintf("action %s %s: %s", e.Action, e.State, e.Message)
}

// MachineWorkflow finds the Workflow a worker with this MAC is served first: the oldest one whose
// hardwareMap device_1 is the MAC and that has not ended (machineWorkflows).
func MachineWorkflow(ctx context.Context, c client.Client, namespace string, m Machine) (*tinkerbell.Workflow, error) {
	open, err := machineWorkflows(ctx, c, namespace, m)
	if err != nil {
		return nil, err
	}
	return &open[0], nil
}

// machineWorkflows finds the Workflows a worker with this MAC is served, oldest first, at least
// one: those whose hardwareMap device_1 is the MAC and that have not ended. Tinkerbell finds them
// through an index; the stack looks first among the Workflows fleetd labelled with the machine's
// device id (one small List), and reads every Workflow of the namespace only when none of those
// is open, so that a netboot does not cost a List of the whole fleet's Workflows. An open
// Workflow for the MAC that carries another device's id or none is therefore not found beside an
// open one of the device: tinkerbell.RunWorker stops the worker if it starts one of its
// containers first.
func machineWorkflows(ctx context.Context, c client.Client, namespace string, m Machine) ([]tinkerbell.Workflow, error) {
	if m.MAC == "" {
		return nil, errors.New("the machine has no MAC in NetBox, so no worker id: Tinkerbell serves it nothing")
	}
	for _, opts := range [][]client.ListOption{
		{client.InNamespace(namespace), client.MatchingLabels{workflows.LabelDeviceID: strconv.FormatInt(m.DeviceID, 10)}},
		{client.InNamespace(namespace)},
	} {
		var list tinkerbell.WorkflowList
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("list Workflows: %w", err)
		}
		if open := openFor(list.Items, m.MAC); len(open) > 0 {
			return open, nil
		}
	}
	return nil, fmt.Errorf("%w for worker %s: no Workflow waits for this machine; ask for an action in NetBox and let fleetd accept it first", ErrNoWorkflow, m.MAC)
}

// openFor is the Workflows for a worker's MAC that have not ended, oldest first.
func openFor(wfs []tinkerbell.Workflow, mac string) []tinkerbell.Workflow {
	var open []tinkerbell.Workflow
	for _, wf := range wfs {
		s := tinkerbell.BareState(wf.Status.State)
		if wf.Spec.HardwareMap[workflows.MapMAC] == mac && (s == "" || s == "PREPARING" || s == "PENDING" || s == "RUNNING") {
			open = append(open, wf)
		}
	}
	sortByCreation(open)
	return open
}

// workflowMarker, in a machine's workflow directory, names the Workflow the directory belongs to.
const workflowMarker = ".workflow"

// useWorkflowDir gives a Workflow its own shared directory, as tink-worker v0.12.2 mounts a
// directory of its own at /workflow for each Workflow and the Templates' shared volume is one of
// the request's own: the directory of another Workflow is emptied first, and a resumed Workflow
// keeps what its earlier actions wrote.
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

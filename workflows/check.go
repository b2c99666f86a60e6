package workflows

import (
	"fmt"
	"path"
	"slices"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// RefusedError is Install's refusal: the Template or the device cannot carry the request, and
// retrying will not change that (docs/design.md §3). It wraps fleet.ErrTemplate, so the request fails with
// Error() as its reason; any other error from Install means the Kubernetes API could not be
// reached or answered unexpectedly, and the caller retries later.
type RefusedError struct {
	Template string // the Template named by the class, "" when the device was the problem
	Reason   string // one sentence without a final period: what is wrong and what to do
}

func (e *RefusedError) Error() string {
	if e.Template == "" {
		return e.Reason
	}
	return fmt.Sprintf("Template %s: %s", e.Template, e.Reason)
}

// Unwrap makes errors.Is(err, fleet.ErrTemplate) true.
func (e *RefusedError) Unwrap() error { return fleet.ErrTemplate }

func refuse(template, format string, args ...any) *RefusedError {
	return &RefusedError{Template: template, Reason: fmt.Sprintf(format, args...)}
}

// AgentActionEnv marks the fleetd agent: the first action of every Template fleetd runs must
// carry FLEETD_ACTION=enroll in its environment (task environment merged with the action's), and
// FLEETD_URL, FLEETD_DEVICE and FLEETD_REQUEST rendered to this Workflow's fleetd_url,
// device_name and request (fleetd refuses an enrollment for another request than the device's
// current one, so a stale Workflow run late cannot enroll for a newer request). An
// explicit marker, rather than a guess from the image name, keeps working when the image is
// mirrored under another name, and states the Template author's intent: no later action (a wipe)
// may run unless the agent has attested the machine first (docs/design.md §1 step 4).
const (
	AgentActionEnv   = "FLEETD_ACTION"
	AgentActionValue = "enroll"
	AgentURLEnv      = "FLEETD_URL"
	AgentDeviceEnv   = "FLEETD_DEVICE"
	AgentRequestEnv  = "FLEETD_REQUEST"
)

// CheckTemplate applies fleetd's own requirements to a Template rendered for Tinkerbell version
// v, beyond what Tinkerbell checks (tink v0.12.2's processRunningWorkflow; one task, as tink#479
// and the newer tinkerbell/tinkerbell's tink/controller/internal/workflow/convert.go require):
//   - global_timeout and every action's timeout are set and positive (0 makes the controller
//     time the Workflow out on its first RUNNING reconcile);
//   - exactly one task, whose worker is the device's MAC (hardwareMap device_1), or no worker
//     would ever be served the Workflow;
//   - the first action is the fleetd agent (AgentActionEnv) talking to this fleetd about this
//     device and this request;
//   - every action sees the agent's files in the request's shared directory (CheckSharedDir).
//
// The error is a *RefusedError naming the first problem.
func CheckTemplate(v Version, name string, r Rendered, hardwareMap map[string]string) error {
	if r.GlobalTimeout <= 0 {
		return refuse(name, "global_timeout is %d: Tinkerbell would time the Workflow out at once; set it to the Workflow's limit in seconds", r.GlobalTimeout)
	}
	if len(r.Tasks) != 1 {
		return refuse(name, "it has %d tasks: fleetd runs Templates with exactly one task (newer Tinkerbell runs only the first)", len(r.Tasks))
	}
	task := r.Tasks[0]
	if task.WorkerAddr != hardwareMap[MapMAC] {
		return refuse(name, "task %s has worker %q, want the device's MAC %q: write worker: \"{{.%s}}\"", task.Name, task.WorkerAddr, hardwareMap[MapMAC], MapMAC)
	}
	if len(task.Actions) == 0 {
		return refuse(name, "task %s has no action: the first action must be the fleetd agent", task.Name)
	}
	for _, a := range task.Actions {
		if a.Timeout <= 0 {
			return refuse(name, "action %s has timeout %d: Tinkerbell would time it out at once; set it in seconds", a.Name, a.Timeout)
		}
	}
	first := task.Actions[0]
	env := MergedEnv(task, first)
	if env[AgentActionEnv] != AgentActionValue {
		return refuse(name, "first action %s (image %s) is not the fleetd agent: it must set %s=%s so that nothing runs before the machine is attested", first.Name, first.Image, AgentActionEnv, AgentActionValue)
	}
	if env[AgentURLEnv] != hardwareMap[MapFleetdURL] || env[AgentDeviceEnv] != hardwareMap[MapDeviceName] {
		return refuse(name, "first action %s has %s=%q and %s=%q, want %q and %q: write {{.%s}} and {{.%s}}", first.Name,
			AgentURLEnv, env[AgentURLEnv], AgentDeviceEnv, env[AgentDeviceEnv],
			hardwareMap[MapFleetdURL], hardwareMap[MapDeviceName], MapFleetdURL, MapDeviceName)
	}
	if env[AgentRequestEnv] != hardwareMap[MapRequest] {
		return refuse(name, "first action %s has %s=%q, want %q: write %s: \"{{.%s}}\" so that the agent enrolls for this Workflow's request only",
			first.Name, AgentRequestEnv, env[AgentRequestEnv], hardwareMap[MapRequest], AgentRequestEnv, MapRequest)
	}
	return CheckSharedDir(v, name, r, hardwareMap[MapRequest])
}

// The request's shared directory: the agent writes the disk it authorized, its certificates and
// the fetch secret into its FLEETD_WORKFLOW_DIR (WorkflowDirEnv; /workflow when unset), and the
// later actions read them there (the wipe reads the authorization; a wipe's receipt step reads
// the grant the agent kept and the erase's report, wipe-result). Templates declare it once, on the task, as a volume named after the
// request (docs/operate.md, "Tinkerbell"):
//
//	environment:
//	  FLEETD_WORKFLOW_DIR: /fleetd
//	volumes:
//	  - /var/lib/fleetd/{{.request}}:/fleetd
const (
	WorkflowDirEnv     = "FLEETD_WORKFLOW_DIR"
	DefaultWorkflowDir = "/workflow"
	// SharedDir is the directory the Templates share in every action, SharedVolume its volume.
	SharedDir    = "/fleetd"
	SharedVolume = "/var/lib/fleetd/{{.request}}:" + SharedDir
)

// CheckSharedDir refuses a rendered Template whose actions would not share the agent's files:
//   - Tinkerbell v0.25's agent binds into an action's container only the volumes the Template
//     declares (tink/agent/internal/runtime/docker), so the agent's FLEETD_WORKFLOW_DIR must be a
//     declared volume, and every action must have that same volume at that same path (a volume
//     declared on the task is every action's);
//   - tink v0.12.2's worker binds a /workflow of its own into every action, so the default needs
//     nothing there; but a volume declared at /workflow as well is refused by Docker ("Duplicate
//     mount point"), and another directory must be declared as on v0.25.
//
// The volume's host directory must name the request (a path element is request, as {{.request}}
// renders), so that no action reads a file an earlier request's actions left on the machine.
func CheckSharedDir(v Version, name string, r Rendered, request string) error {
	if len(r.Tasks) != 1 || len(r.Tasks[0].Actions) == 0 {
		return nil // CheckTemplate refused it already
	}
	task := r.Tasks[0]
	agent := task.Actions[0]
	dir := workflowDir(task, agent)
	if v == TinkerbellV012 {
		for _, a := range task.Actions {
			if src := volumeAt(task, a, DefaultWorkflowDir); src != "" {
				return refuse(name, "action %s declares a volume at %s (%s:%s), where tink-worker v0.12 mounts its own: Docker refuses the container (Duplicate mount point); share %s instead, as %s",
					a.Name, DefaultWorkflowDir, src, DefaultWorkflowDir, SharedDir, sharedHint())
			}
		}
		if dir == DefaultWorkflowDir {
			return nil
		}
	}
	src := volumeAt(task, agent, dir)
	if src == "" {
		return refuse(name, "the agent (action %s) writes its files to %s, which no volume of it mounts: Tinkerbell %s's worker shares nothing between actions but the volumes a Template declares; declare the request's shared volume on the task: %s",
			agent.Name, dir, v, sharedHint())
	}
	if !namesRequest(src, request) {
		return refuse(name, "the shared volume %s:%s of action %s does not name the request %s in its host directory: an action could read what an earlier request's actions left there; declare %s",
			src, dir, agent.Name, request, sharedHint())
	}
	for _, a := range task.Actions[1:] {
		if got := workflowDir(task, a); got != dir {
			return refuse(name, "action %s reads its files from %s=%s, but the agent writes them to %s: set %s once, on the task", a.Name, WorkflowDirEnv, got, dir, WorkflowDirEnv)
		}
		if got := volumeAt(task, a, dir); got != src {
			return refuse(name, "action %s does not mount the shared volume %s:%s the agent writes its files to (it has %q there): declare the volume on the task, so that every action has it",
				a.Name, src, dir, got)
		}
	}
	return nil
}

// sharedHint is how a Template declares the shared directory.
func sharedHint() string {
	return fmt.Sprintf("environment %s: %s and volume %s", WorkflowDirEnv, SharedDir, SharedVolume)
}

// workflowDir is an action's FLEETD_WORKFLOW_DIR, in its container.
func workflowDir(task tinkv1.Task, a tinkv1.Action) string {
	if d := MergedEnv(task, a)[WorkflowDirEnv]; d != "" {
		return path.Clean(d)
	}
	return DefaultWorkflowDir
}

// volumeAt is the host directory of the action's volume at dir (the task's volumes, then the
// action's, as the worker passes them), or "".
func volumeAt(task tinkv1.Task, a tinkv1.Action, dir string) string {
	for _, vol := range append(append([]string(nil), task.Volumes...), a.Volumes...) {
		parts := strings.Split(vol, ":")
		if len(parts) >= 2 && path.Clean(parts[1]) == dir {
			return parts[0]
		}
	}
	return ""
}

// namesRequest says whether a path element of dir is the request id.
func namesRequest(dir, request string) bool {
	return request != "" && slices.Contains(strings.Split(path.Clean(dir), "/"), request)
}

// FetchSecretEnv marks the action that carries the fetch secret from the agent to the
// configuration fetch (docs/security.md, "The configuration fetch"): a provision's attestation
// hands the agent a one-time secret, which it writes into the request's shared directory as
// FetchSecretFile (agent.FileFetchSecret), for a class kind whose install can carry it
// (fleet.Kind.CarriesFetchSecret). The action that fetches the NoCloud seed, or that writes the
// secret into a seed image, names the file in its environment; without one the node could never
// fetch its configuration, and the request would end only when the configuration expires.
const (
	FetchSecretEnv  = "FLEETD_FETCH_SECRET_FILE"
	FetchSecretFile = "fetch-secret"
)

// TalosMetaActionValue marks a Talos provision's META step: the agent image with
// AgentActionEnv=TalosMetaActionValue runs `fleetd talos-meta`, which writes the fetch secret
// into the written disk's META, whence Talos fills the ${code} of its talos.config= URL
// (docs/operate.md, "The Talos META step"). It reads the secret from FetchSecretFile itself.
const TalosMetaActionValue = api.AgentActionTalosMeta

// CheckFetchSecret refuses a provision Template of a kind whose install carries the fetch
// secret when no action after the agent carries it: for Talos, the agent's image with
// AgentActionEnv=TalosMetaActionValue; for the other kinds, an action with
// FetchSecretEnv=FetchSecretFile.
func CheckFetchSecret(name string, r Rendered, action fleet.Action, kind fleet.Kind) error {
	if action != fleet.ActionProvision || !kind.CarriesFetchSecret() || len(r.Tasks) != 1 || len(r.Tasks[0].Actions) == 0 {
		return nil
	}
	task := r.Tasks[0]
	agent := task.Actions[0]
	for _, a := range task.Actions[1:] {
		env := MergedEnv(task, a)
		if kind == fleet.KindTalos && env[AgentActionEnv] == TalosMetaActionValue && a.Image == agent.Image {
			return nil
		}
		if kind != fleet.KindTalos && env[FetchSecretEnv] == FetchSecretFile {
			return nil
		}
	}
	if kind == fleet.KindTalos {
		return refuse(name, "no action after the agent has %s=%s in the agent's image: a Talos node fetches its configuration with the fetch secret as its URL's code, which Talos reads from the disk's META; add right after the image write "+
			"the action {name: talos-meta, image: %s, timeout: 120, environment: {%s: %s}}",
			AgentActionEnv, TalosMetaActionValue, agent.Image, AgentActionEnv, TalosMetaActionValue)
	}
	return refuse(name, "no action after the agent has %s=%s: a %s node fetches its configuration with the fetch secret the agent writes there, so an action must carry it to the fetch",
		FetchSecretEnv, FetchSecretFile, kind)
}

// ReceiptActionValue marks a wipe's or a retirement's receipt step: the agent image with
// AgentActionEnv=ReceiptActionValue runs `fleetd wipe-receipt`, which quotes the erase's report
// with the TPM key the attestation activated (docs/http.md, "Wipe receipts").
const ReceiptActionValue = api.AgentActionWipeReceipt

// CheckWipeReceipt finds a wipe or retirement Template without a receipt step: no action after the
// agent with AgentActionEnv=ReceiptActionValue. Such a Workflow can erase the disk but never
// confirm it to fleetd, so its wipe is unconfirmed however it ends. fleetd check reports it with
// what to add (docs/operate.md, "The wipe receipt step"); Install does not refuse it, so that an
// upgrade of fleetd does not stop the wipes of a site whose Templates are not updated yet.
func CheckWipeReceipt(name string, r Rendered, action fleet.Action) error {
	if action != fleet.ActionWipe && action != fleet.ActionRetire || len(r.Tasks) != 1 || len(r.Tasks[0].Actions) == 0 {
		return nil
	}
	task := r.Tasks[0]
	for _, a := range task.Actions[1:] {
		if MergedEnv(task, a)[AgentActionEnv] == ReceiptActionValue {
			return nil
		}
	}
	agent := task.Actions[0]
	return refuse(name, "no action after the agent has %s=%s: fleetd cannot confirm this %s's erase and records it unconfirmed; add right after the erase, which must report to wipe-result in the shared directory, "+
		"the action {name: wipe-receipt, image: %s, timeout: 120, environment: {%s: %s}}",
		AgentActionEnv, ReceiptActionValue, action, agent.Image, AgentActionEnv, ReceiptActionValue)
}

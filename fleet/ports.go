package fleet

import (
	"context"
	"errors"
	"github.com/folly-infra/fleetd/netbox/layout"
	"io"
	"time"
)

// The ports: the only ways the domain reaches the outside. Adapters implement them (netbox/,
// workflows/); tests implement them with the real adapters against the development stack or with
// small fakes where a test is about the domain alone.

// ErrNotFound is returned by a port when the object it was asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned by NetBox.Update when the device changed since the version the
// update was conditioned on (NetBox answered 412 Precondition Failed).
var ErrConflict = errors.New("device changed since it was read")

// ErrNetBoxUnavailable marks an error that came from NetBox (unreachable or failing): the
// adapters answer it with 503 so that the caller (NetBox's webhook worker, an operator) can tell
// "fleetd could not read NetBox" from "fleetd refused".
var ErrNetBoxUnavailable = errors.New("netbox unavailable")

// NetBox is the port to NetBox's devices, the only durable state (docs/design.md §2): the netbox
// package implements it over NetBox's REST API, fleettest in memory.
//
// Errors: ErrNotFound (wrapped) for a device that does not exist; ErrConflict (wrapped) for a
// failed If-Match; anything else means NetBox could not be reached or answered 5xx after the
// adapter's bounded retries, and the caller must treat the operation as not done.
type NetBox interface {
	// Device reads one device by its NetBox id.
	Device(ctx context.Context, id int64) (Device, error)
	// DeviceFields reads one device by its NetBox id like Device, with its Version, but without
	// its MACs (nil): one NetBox request, for a decision that needs only the device's own fields
	// (the hourly boot check).
	DeviceFields(ctx context.Context, id int64) (Device, error)
	// DeviceID finds the id of the device of this exact NetBox name (ErrNotFound: none).
	DeviceID(ctx context.Context, name string) (int64, error)
	// DeviceHistory reads the device's saves in NetBox's change log (its creation and its
	// updates), newest first, up to and including the first for which until reports true, or to
	// the end of the log. NetBox's change log is the one record of who wrote what that a NetBox
	// user who may edit devices cannot write (docs/design.md §9, "Sealed fields").
	DeviceHistory(ctx context.Context, id int64, until func(DeviceChange) bool) ([]DeviceChange, error)
	// Devices lists every device (the reconcile and the Kea reservations read it).
	Devices(ctx context.Context) ([]Device, error)
	// Update writes only the keys the patch sets. It returns the device as NetBox has it after
	// the write (with its new Version), but without its MACs (nil): a patch never changes them,
	// so they are not read again; the caller keeps the ones it read.
	Update(ctx context.Context, id int64, p Patch) (Device, error)
	// Journal adds a journal entry to the device.
	Journal(ctx context.Context, id int64, kind JournalKind, text string) error
}

// Patch is a write of fleetd's own custom fields and the device status. A nil pointer leaves a
// key alone; a pointer to the zero value clears the key (JSON null).
type Patch struct {
	// IfVersion makes the write conditional on the device's Version (If-Match). Empty means
	// unconditional, which is also what happens on NetBox without ETags (last write wins).
	IfVersion string

	ClearDesiredAction bool
	Status             Status // "" leaves the status alone

	State        *State
	Message      *string
	Request      *string
	Workflow     *string
	LDevIDSerial *string
	LAKSerial    *string
	// The serials a renewal replaced (Owned.LAKSerialPrevious); "" clears them.
	LDevIDSerialPrevious *string
	LAKSerialPrevious    *string
	BootBaseline         *string
	LastBootCheck        *time.Time
	BootCheck            *BootCheck
	Identity             *IdentityMaterial // a pointer to the zero value clears fleet_identity
	Facts                *layout.Facts     // a pointer to the zero value clears fleet_facts
	// Seal is fleet_seal: the seal of every field fleetd owns as the device holds them after
	// the write (seal.go). The service sets it on every write it makes; "" writes none.
	Seal string
}

// Empty reports whether the patch writes nothing.
func (p Patch) Empty() bool {
	return !p.ClearDesiredAction && p.Status == "" && p.State == nil && p.Message == nil &&
		p.Request == nil && p.Workflow == nil && p.LDevIDSerial == nil && p.LAKSerial == nil &&
		p.LDevIDSerialPrevious == nil && p.LAKSerialPrevious == nil &&
		p.BootBaseline == nil && p.LastBootCheck == nil && p.BootCheck == nil && p.Identity == nil &&
		p.Facts == nil && p.Seal == ""
}

// Installer is Tinkerbell (docs/design.md §3).
//
// Errors: ErrNotFound (wrapped) from Workflow when it does not exist; anything else means the
// Kubernetes API could not be reached or refused the object, and the caller retries later.
type Installer interface {
	// Install makes sure the device's Hardware is up to date and the request's Workflow exists.
	// It is idempotent: a Workflow of the same name that already exists is success, never a
	// second Workflow.
	Install(ctx context.Context, w WorkflowSpec) error
	// Workflow reads the progress of a Workflow.
	Workflow(ctx context.Context, name string) (WorkflowStatus, error)
}

// WorkflowLister is an Installer that can read all of fleetd's Workflows at once. When the
// Installer has it, the periodic reconcile (Requests.ReconcileAll) reads every Workflow in one listing
// instead of one read per running request; a Workflow missing from the listing (created since)
// is read on its own.
//
// Errors: anything means the Workflows could not be listed; the reconcile then reads each one.
type WorkflowLister interface {
	Workflows(ctx context.Context) (map[string]WorkflowStatus, error) // by Workflow name
}

// WorkflowPruner is an Installer that deletes ended Workflows (docs/operate.md, "Tinkerbell"). The
// periodic reconcile calls it after each pass with the Workflows whose end fleetd has not
// recorded yet (keep: the running requests' that wait for their Workflow, in pending, installing
// or wiping), which it must keep whatever their age; it deletes the others only well after they
// ended. A Workflow missing after its end was recorded is no event (EventWorkflowMissing).
//
// Errors: anything means some ended Workflows were not deleted; the next pass tries again.
type WorkflowPruner interface {
	PruneWorkflows(ctx context.Context, keep map[string]bool) error
}

// WorkflowSpec is everything the installer needs to create the Workflow of one request.
type WorkflowSpec struct {
	Name      string // deterministic, from the request id (WorkflowName)
	Template  string
	Device    Device
	Class     Class
	Action    Action
	Request   string
	FleetdURL string // where the agent reaches fleetd, passed through hardwareMap
}

// WorkflowPhase is a Workflow's state in fleetd's words, whatever Tinkerbell spelling it had.
type WorkflowPhase string

const (
	WorkflowWaiting   WorkflowPhase = "waiting" // created, preparing or pending: no action ran yet
	WorkflowRunning   WorkflowPhase = "running"
	WorkflowSucceeded WorkflowPhase = "succeeded"
	WorkflowFailed    WorkflowPhase = "failed"
	WorkflowTimedOut  WorkflowPhase = "timed-out"
)

// Terminal reports whether the Workflow will not change any more.
func (p WorkflowPhase) Terminal() bool {
	return p == WorkflowSucceeded || p == WorkflowFailed || p == WorkflowTimedOut
}

// WorkflowStatus is what fleetd reads of a Workflow.
type WorkflowStatus struct {
	Name          string
	Phase         WorkflowPhase
	CurrentAction string
	FailedAction  string // the action that failed or timed out, when one did
	Message       string // that action's message
}

// Clock is the time source (injected so tests control expiry and boot-check ages).
type Clock interface {
	Now() time.Time
}

// SPIRE is the port to a SPIRE server's agent API (docs/operate.md, "SPIRE"): package spire
// implements it over the server's admin socket. fleetd bans a device's agents when its wipe or
// retirement starts (docs/security.md, "SPIRE identity").
//
// BanDevice bans every agent the server attested with an LDevID of the device of this name: a
// tpm_devid agent whose selectors carry the name as the LDevID's subject CN and the CN of
// fleetd's LDevID CA as its issuer. tpm_devid names an agent by its certificate, so a renewed
// node has one agent per LDevID it presented, and each is banned. Agents already banned are left
// alone; it returns how many it banned now. An error means some agent may be left unbanned (the
// count says how many were banned before it): the caller tries again.
type SPIRE interface {
	BanDevice(ctx context.Context, device string) (int, error)
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns the current time.
func (SystemClock) Now() time.Time { return time.Now() }

// Random is the randomness source for request ids, nonces and serials (crypto/rand.Reader in
// production, a seeded reader in tests).
type Random = io.Reader

// Renderer renders the configuration a node fetches once (docs/design.md §1 steps 4 and 6, §9):
// of device d, of class c, for the machine attestation identified as id. Package render
// implements it (Talos machine configs, the seeds' JSON, NoCloud tars); it is pure and safe for
// concurrent use.
//
// Errors: one wrapping ErrConfigRejected when d's declaration or c would produce a configuration
// the OS rejects (the text after it is safe to journal, and ends the request); any other error is
// fleetd's own failure. A configuration the OS would reject is never returned.
//
// Check makes every check Render makes and returns the configuration without its Body: an
// attestation checks the configuration it will deliver and keeps only its summary (the fetch
// renders it again), so it need not pay for encoding it. Its errors are Render's.
type Renderer interface {
	Render(d Device, c Class, id NodeIdentity) (NodeConfig, error)
	Check(d Device, c Class, id NodeIdentity) (NodeConfig, error)
}

// Cluster is the workload cluster that the nodes of classes joining Kubernetes join
// (cluster.kubeconfig; docs/design.md §1, "Joining the cluster"): fleetd creates each device's
// bootstrap token there, decides its kubelets' certificate signing requests, reads its Nodes,
// and cordons and deletes the Nodes of leaving devices.
// Its identity there is fleetd's own, with the permissions docs/operate.md lists.
type Cluster interface {
	// CreateBootstrapToken creates the token's Secret in kube-system, or replaces one of the same
	// id (an attestation answered again after a lost answer derives the same token).
	CreateBootstrapToken(ctx context.Context, t BootstrapTokenSecret) error
	// DeleteBootstrapToken deletes the token's Secret; one already gone is no error.
	DeleteBootstrapToken(ctx context.Context, id string) error
	// DecideCSR sets the CSR's Approved or Denied condition with the decision's reason and
	// message. A CSR decided meanwhile (by another fleetd instance) is no error.
	DecideCSR(ctx context.Context, csr CSR, d CSRDecision) error
	// CordonNode marks the Node named unschedulable; changed is false when it already was or
	// the cluster has no Node of that name (no error).
	CordonNode(ctx context.Context, name string) (changed bool, err error)
	// DeleteNode deletes the Node named; deleted is false when the cluster has none (no error).
	DeleteNode(ctx context.Context, name string) (deleted bool, err error)
}

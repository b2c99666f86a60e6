package fleet

// The lifecycle of a request, as one transition function over typed states (docs/design.md §1, §2).
//
// A device carries at most one request at a time. A request starts when fleetd claims it from
// NetBox (desired_action, or status decommissioning for retirement) and ends in a terminal state.
// A new request is taken only from a terminal state; one that arrives while another runs waits in
// NetBox until the running one ends, because every running request reaches a terminal state (the
// Workflow has explicit timeouts and a pending configuration expires).

// State is the fleet_state custom field.
type State string

const (
	StateNone        State = "" // never handled by fleetd
	StatePending     State = "pending"
	StateInstalling  State = "installing"
	StateConfiguring State = "configuring"
	// StateJoining: the node of a class that joins Kubernetes fetched its configuration and boots
	// into the cluster (docs/design.md §1, "Joining the cluster"). It takes boot checks and
	// renewals; it becomes active when its Node is Ready with the client certificate fleetd
	// approved for this request, and the request fails when that does not happen by the join
	// deadline.
	StateJoining  State = "joining"
	StateActive   State = "active"
	StateWiping   State = "wiping"
	StateWiped    State = "wiped"
	StateRetired  State = "retired"
	StateFailed   State = "failed"
	StateRejected State = "rejected"
	// StateUntrusted: fleetd found values of its fields in NetBox it did not write and nothing of
	// its own to put back (trust.go): it cleared them, and only an owner's new request brings
	// the device back.
	StateUntrusted State = "untrusted"
	// StateUnconfirmed: a wipe's or a retirement's Workflow was reported successful and no
	// verified receipt of its erase had been recorded (receipt.go): the action states say the
	// disk was erased, the machine's TPM never did. Terminal: the owner asks for the wipe again.
	StateUnconfirmed State = "unconfirmed"
)

// States lists the fleet_state choices in lifecycle order.
var States = []State{StatePending, StateInstalling, StateConfiguring, StateJoining, StateActive, StateWiping,
	StateWiped, StateRetired, StateFailed, StateRejected, StateUntrusted, StateUnconfirmed}

// Terminal reports whether no request is running in this state, so a new one may start.
func (s State) Terminal() bool {
	switch s {
	case StatePending, StateInstalling, StateConfiguring, StateJoining, StateWiping:
		return false
	}
	return true
}

// Running reports whether the installed node runs in this state: its boot checks and renewals
// are taken (active, and joining while its Node registers).
func (s State) Running() bool {
	return s == StateActive || s == StateJoining
}

// Event is something that happened to a device's request.
type Event string

const (
	EventAccepted          Event = "accepted"           // fleetd claimed a valid request
	EventRejected          Event = "rejected"           // the declaration cannot carry the request
	EventAttested          Event = "attested"           // the agent proved the machine's identity and disk
	EventRefused           Event = "refused"            // the agent's evidence was refused
	EventWorkflowSucceeded Event = "workflow-succeeded" // the Workflow reached its success state
	EventWorkflowFailed    Event = "workflow-failed"    // the Workflow failed or timed out
	EventDelivered         Event = "delivered"          // the node fetched its configuration
	// EventDeliveredJoining is the delivery to a node of a class that joins Kubernetes
	// (Class.JoinsKubernetes): its install is done only when its Node is Ready.
	EventDeliveredJoining Event = "delivered-joining"
	// EventNodeReady is the device's Node Ready, registered with the kubelet client certificate
	// fleetd approved for the device's request (membership.go).
	EventNodeReady Event = "node-ready"
	// EventJoinTimedOut is the join deadline passed with the device's Node not Ready.
	EventJoinTimedOut Event = "join-timed-out"
	EventConfigLost   Event = "config-lost" // the pending configuration was lost or expired
	// EventWorkflowMissing is the request's Workflow no longer in Kubernetes. Before its end is
	// recorded (pending, installing, wiping) it fails the request; after (configuring, active and
	// every terminal state) it is no event: fleetd prunes an ended Workflow an hour after it ended
	// (docs/operate.md, "Tinkerbell"), and an instance running behind that reads it missing must
	// not fail a device whose request already moved on.
	EventWorkflowMissing Event = "workflow-missing"
	// EventReceiptVerified is a verified wipe receipt of the device's running wipe or retirement
	// (attest.VerifyReceipt): the machine's TPM quoted the erase's report in the attested boot.
	EventReceiptVerified Event = "receipt-verified"
)

// JournalKind is the kind of a NetBox journal entry.
type JournalKind string

const (
	JournalInfo    JournalKind = "info"
	JournalSuccess JournalKind = "success"
	JournalWarning JournalKind = "warning"
	JournalDanger  JournalKind = "danger"
)

// Transition is what one event does to a device.
type Transition struct {
	To         State
	Status     Status      // the NetBox status to set, "" to leave it
	Journal    JournalKind // the kind of the journal entry that records it
	ClearCerts bool        // the device's LDevID and LAK serials stop being valid
}

// Next is the lifecycle: the transition an event causes for a device in state from that carries
// a request for action. ok is false when the event means nothing in that state (a duplicate or a
// late report); the caller then changes nothing.
func Next(from State, action Action, ev Event) (t Transition, ok bool) {
	switch ev {
	case EventAccepted:
		if !from.Terminal() {
			return Transition{}, false
		}
		t = Transition{To: StatePending, Journal: JournalInfo}
		if action == ActionProvision {
			t.Status = StatusStaged
		}
		return t, true
	case EventRejected:
		if !from.Terminal() {
			return Transition{}, false
		}
		return Transition{To: StateRejected, Journal: JournalWarning}, true
	}

	switch from {
	case StatePending:
		switch ev {
		case EventAttested:
			switch action {
			case ActionProvision:
				return Transition{To: StateInstalling, Journal: JournalSuccess}, true
			case ActionAttest:
				return Transition{To: StateActive, Journal: JournalSuccess}, true
			case ActionWipe, ActionRetire:
				return Transition{To: StateWiping, Journal: JournalSuccess}, true
			}
		case EventRefused, EventWorkflowFailed, EventWorkflowMissing:
			return failed(action), true
		case EventWorkflowSucceeded:
			// A Workflow that ends without the agent's attestation never ran the agent: the
			// Template is wrong. Nothing was authorized, so the request fails.
			return failed(action), true
		}
	case StateInstalling:
		switch ev {
		case EventWorkflowSucceeded:
			return Transition{To: StateConfiguring, Journal: JournalInfo}, true
		case EventDelivered: // cloud-init-nocloud: delivered by the install Workflow itself
			return Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true
		case EventDeliveredJoining: // the node booted before Tinkerbell reported the Workflow's success
			return Transition{To: StateJoining, Status: StatusActive, Journal: JournalSuccess}, true
		case EventWorkflowFailed, EventConfigLost, EventWorkflowMissing:
			return failed(action), true
		}
	case StateConfiguring:
		switch ev {
		case EventDelivered:
			return Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true
		case EventDeliveredJoining:
			// The status moves to active with the delivery, as for every kind: a running
			// provision whose status is active was delivered (delivery.go), whatever a copy
			// written back says its fleet_state is.
			return Transition{To: StateJoining, Status: StatusActive, Journal: JournalSuccess}, true
		case EventConfigLost:
			return failed(action), true
		}
	case StateJoining:
		switch ev {
		case EventNodeReady:
			return Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true
		case EventJoinTimedOut:
			return failed(action), true
		case EventWorkflowFailed: // delivered before the Workflow's end, as for an active node below
			if action == ActionProvision {
				return failed(action), true
			}
		}
	case StateWiping:
		// Only the machine's TPM says a disk was erased (docs/design.md §4, "Wipe receipts"): a
		// verified receipt ends the request wiped (retired); a Workflow that succeeds with none
		// recorded ends it unconfirmed, since its action states are whatever reported them.
		// Either way the device's identity ends.
		switch ev {
		case EventReceiptVerified:
			if action == ActionRetire {
				return Transition{To: StateRetired, Journal: JournalSuccess, ClearCerts: true}, true
			}
			return Transition{To: StateWiped, Status: StatusOffline, Journal: JournalSuccess, ClearCerts: true}, true
		case EventWorkflowSucceeded:
			t := Transition{To: StateUnconfirmed, Journal: JournalDanger, ClearCerts: true}
			if action != ActionRetire {
				t.Status = StatusFailed
			}
			return t, true
		case EventWorkflowFailed, EventWorkflowMissing:
			return failed(action), true
		}
	case StateActive:
		// A provision whose configuration was delivered during the Workflow (NoCloud) can still
		// see its Workflow fail in a later action: the install did not finish. Its Workflow
		// missing is no failure (EventWorkflowMissing).
		if ev == EventWorkflowFailed && action == ActionProvision {
			return failed(action), true
		}
	}
	return Transition{}, false
}

// failed ends a request in failure. A retirement keeps the owner's decommissioning status.
func failed(action Action) Transition {
	t := Transition{To: StateFailed, Journal: JournalDanger}
	if action != ActionRetire {
		t.Status = StatusFailed
	}
	return t
}

package fleet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLifecycle is the lifecycle's specification: every row is one event in one state for one
// action, and what it must do. Rows are named for the outcome.
func TestLifecycle(t *testing.T) {
	type row struct {
		name   string
		from   State
		action Action
		ev     Event
		want   Transition
		ok     bool
	}
	rows := []row{
		// Claiming a request.
		{"ok/provision accepted from nothing: pending, status staged", StateNone, ActionProvision, EventAccepted,
			Transition{To: StatePending, Status: StatusStaged, Journal: JournalInfo}, true},
		{"ok/reprovision accepted from active", StateActive, ActionProvision, EventAccepted,
			Transition{To: StatePending, Status: StatusStaged, Journal: JournalInfo}, true},
		{"ok/attest accepted keeps status", StateActive, ActionAttest, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		{"ok/wipe accepted after a failure", StateFailed, ActionWipe, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		{"ok/retire accepted after rejection", StateRejected, ActionRetire, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		// An untrusted device (fleetd could not vouch for its fields): only an owner's new request,
		// which proves the machine by its EK again, brings it back; nothing else moves it.
		{"ok/attest accepted on an untrusted device", StateUntrusted, ActionAttest, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		{"ok/provision accepted on an untrusted device: status staged", StateUntrusted, ActionProvision, EventAccepted,
			Transition{To: StatePending, Status: StatusStaged, Journal: JournalInfo}, true},
		{"ok/wipe accepted on an untrusted device", StateUntrusted, ActionWipe, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		{"ignore/an untrusted device takes no attestation", StateUntrusted, ActionProvision, EventAttested, Transition{}, false},
		{"ignore/an untrusted device takes no delivery", StateUntrusted, ActionProvision, EventDelivered, Transition{}, false},
		{"ignore/an untrusted device takes no Workflow outcome", StateUntrusted, ActionWipe, EventWorkflowSucceeded, Transition{}, false},
		{"ignore/no new request while one is installing", StateInstalling, ActionWipe, EventAccepted, Transition{}, false},
		{"ignore/no new request while pending", StatePending, ActionProvision, EventAccepted, Transition{}, false},
		{"ignore/no new request while configuring", StateConfiguring, ActionProvision, EventAccepted, Transition{}, false},
		{"ignore/no new request while wiping", StateWiping, ActionRetire, EventAccepted, Transition{}, false},
		{"refuse/rejected declaration ends the request", StateActive, ActionProvision, EventRejected,
			Transition{To: StateRejected, Journal: JournalWarning}, true},
		{"ignore/rejection cannot interrupt a running request", StateWiping, ActionRetire, EventRejected, Transition{}, false},

		// Attestation.
		{"ok/provision attested: installing", StatePending, ActionProvision, EventAttested,
			Transition{To: StateInstalling, Journal: JournalSuccess}, true},
		{"ok/attest attested: done, active", StatePending, ActionAttest, EventAttested,
			Transition{To: StateActive, Journal: JournalSuccess}, true},
		{"ok/wipe attested: wiping", StatePending, ActionWipe, EventAttested,
			Transition{To: StateWiping, Journal: JournalSuccess}, true},
		{"ok/retire attested: wiping", StatePending, ActionRetire, EventAttested,
			Transition{To: StateWiping, Journal: JournalSuccess}, true},
		{"refuse/provision refused at attestation: failed, status failed", StatePending, ActionProvision, EventRefused,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/retire refused keeps decommissioning", StatePending, ActionRetire, EventRefused,
			Transition{To: StateFailed, Journal: JournalDanger}, true},
		{"ignore/second attestation after installing", StateInstalling, ActionProvision, EventAttested, Transition{}, false},
		{"refuse/Workflow succeeded without attestation fails the request", StatePending, ActionProvision, EventWorkflowSucceeded,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/agent failed: Workflow failed while pending", StatePending, ActionWipe, EventWorkflowFailed,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},

		// Installation and configuration.
		{"ok/install Workflow succeeded: configuring", StateInstalling, ActionProvision, EventWorkflowSucceeded,
			Transition{To: StateConfiguring, Journal: JournalInfo}, true},
		{"ok/configuration delivered: active, status active", StateConfiguring, ActionProvision, EventDelivered,
			Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true},
		{"ok/NoCloud delivered during the Workflow: active", StateInstalling, ActionProvision, EventDelivered,
			Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true},
		{"ignore/NoCloud Workflow success after delivery", StateActive, ActionProvision, EventWorkflowSucceeded, Transition{}, false},
		{"refuse/NoCloud Workflow failed after delivery", StateActive, ActionProvision, EventWorkflowFailed,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/install Workflow failed", StateInstalling, ActionProvision, EventWorkflowFailed,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/pending configuration lost while installing", StateInstalling, ActionProvision, EventConfigLost,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/pending configuration lost while configuring", StateConfiguring, ActionProvision, EventConfigLost,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"ignore/second delivery", StateActive, ActionProvision, EventDelivered, Transition{}, false},

		// Joining the cluster: a class that joins Kubernetes is done when its Node is Ready.
		{"ok/delivered to a joining class: joining, status active", StateConfiguring, ActionProvision, EventDeliveredJoining,
			Transition{To: StateJoining, Status: StatusActive, Journal: JournalSuccess}, true},
		{"ok/Node Ready: active", StateJoining, ActionProvision, EventNodeReady,
			Transition{To: StateActive, Status: StatusActive, Journal: JournalSuccess}, true},
		{"refuse/Node not Ready by the join deadline: failed, status failed", StateJoining, ActionProvision, EventJoinTimedOut,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"ignore/no new request while joining", StateJoining, ActionWipe, EventAccepted, Transition{}, false},
		{"ignore/second delivery while joining", StateJoining, ActionProvision, EventDelivered, Transition{}, false},
		{"ok/delivered to a joining class before the Workflow's success: joining", StateInstalling, ActionProvision, EventDeliveredJoining,
			Transition{To: StateJoining, Status: StatusActive, Journal: JournalSuccess}, true},
		{"ignore/the Workflow's success while joining", StateJoining, ActionProvision, EventWorkflowSucceeded, Transition{}, false},
		{"refuse/the Workflow failed after the delivery while joining", StateJoining, ActionProvision, EventWorkflowFailed,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"ignore/Node Ready once active (an existing node)", StateActive, ActionProvision, EventNodeReady, Transition{}, false},
		{"ignore/Node Ready before the delivery", StateConfiguring, ActionProvision, EventNodeReady, Transition{}, false},
		{"ignore/join deadline once active", StateActive, ActionProvision, EventJoinTimedOut, Transition{}, false},
		{"ignore/Workflow missing while joining (its end is recorded)", StateJoining, ActionProvision, EventWorkflowMissing, Transition{}, false},
		{"ignore/configuration lost once delivered", StateJoining, ActionProvision, EventConfigLost, Transition{}, false},
		{"ignore/Workflow success twice", StateConfiguring, ActionProvision, EventWorkflowSucceeded, Transition{}, false},

		// Wipe and retirement: done on the machine's TPM's receipt, unconfirmed on the Workflow's
		// action states alone.
		{"ok/wipe's receipt verified: wiped, offline, certificates forgotten", StateWiping, ActionWipe, EventReceiptVerified,
			Transition{To: StateWiped, Status: StatusOffline, Journal: JournalSuccess, ClearCerts: true}, true},
		{"ok/retirement's receipt verified: retired, status stays, certificates forgotten", StateWiping, ActionRetire, EventReceiptVerified,
			Transition{To: StateRetired, Journal: JournalSuccess, ClearCerts: true}, true},
		{"refuse/wipe's Workflow succeeded with no receipt: unconfirmed, failed, certificates forgotten", StateWiping, ActionWipe, EventWorkflowSucceeded,
			Transition{To: StateUnconfirmed, Status: StatusFailed, Journal: JournalDanger, ClearCerts: true}, true},
		{"refuse/retirement's Workflow succeeded with no receipt: unconfirmed, status stays", StateWiping, ActionRetire, EventWorkflowSucceeded,
			Transition{To: StateUnconfirmed, Journal: JournalDanger, ClearCerts: true}, true},
		{"ignore/Workflow success after the receipt", StateWiped, ActionWipe, EventWorkflowSucceeded, Transition{}, false},
		{"ignore/retirement's Workflow success after the receipt", StateRetired, ActionRetire, EventWorkflowSucceeded, Transition{}, false},
		{"ignore/a receipt again once wiped (a replay)", StateWiped, ActionWipe, EventReceiptVerified, Transition{}, false},
		{"ignore/a receipt once unconfirmed", StateUnconfirmed, ActionWipe, EventReceiptVerified, Transition{}, false},
		{"ignore/a receipt once failed", StateFailed, ActionWipe, EventReceiptVerified, Transition{}, false},
		{"ignore/a receipt before the attestation", StatePending, ActionWipe, EventReceiptVerified, Transition{}, false},
		{"ignore/a receipt of a provision", StateInstalling, ActionProvision, EventReceiptVerified, Transition{}, false},
		{"ok/wipe accepted again after an unconfirmed one", StateUnconfirmed, ActionWipe, EventAccepted,
			Transition{To: StatePending, Journal: JournalInfo}, true},
		{"ok/provision accepted after an unconfirmed wipe: status staged", StateUnconfirmed, ActionProvision, EventAccepted,
			Transition{To: StatePending, Status: StatusStaged, Journal: JournalInfo}, true},
		{"ignore/an unconfirmed device takes no Workflow outcome", StateUnconfirmed, ActionWipe, EventWorkflowFailed, Transition{}, false},
		{"refuse/wipe Workflow failed", StateWiping, ActionWipe, EventWorkflowFailed,
			Transition{To: StateFailed, Status: StatusFailed, Journal: JournalDanger}, true},
		{"refuse/retire Workflow failed keeps decommissioning", StateWiping, ActionRetire, EventWorkflowFailed,
			Transition{To: StateFailed, Journal: JournalDanger}, true},

		// Late and stray reports change nothing.
		{"ignore/Workflow failure after the request ended", StateWiped, ActionWipe, EventWorkflowFailed, Transition{}, false},
		{"ignore/attestation with no request", StateActive, ActionAttest, EventAttested, Transition{}, false},
		{"ignore/delivery to a wiped device", StateWiped, ActionProvision, EventDelivered, Transition{}, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got, ok := Next(r.from, r.action, r.ev)
			if ok != r.ok {
				t.Fatalf("Next(%q, %s, %s) ok = %v, want %v", r.from, r.action, r.ev, ok, r.ok)
			}
			if diff := cmp.Diff(r.want, got); diff != "" {
				t.Errorf("Next(%q, %s, %s) (-want +got):\n%s", r.from, r.action, r.ev, diff)
			}
		})
	}
}

// TestLifecycleTerminates checks that from every state a request can be in, some event ends it:
// no request can be stuck by the lifecycle itself.
func TestLifecycleTerminates(t *testing.T) {
	events := []Event{EventAttested, EventRefused, EventReceiptVerified, EventWorkflowSucceeded, EventWorkflowFailed, EventDelivered,
		EventDeliveredJoining, EventNodeReady, EventJoinTimedOut, EventConfigLost}
	for _, a := range Actions {
		for _, s := range States {
			if s.Terminal() {
				continue
			}
			if !canEnd(s, a, events, 0) {
				t.Errorf("a %s request in state %s can never end", a, s)
			}
		}
	}
}

func canEnd(s State, a Action, events []Event, depth int) bool {
	if depth > len(States) {
		return false
	}
	for _, ev := range events {
		tr, ok := Next(s, a, ev)
		if !ok {
			continue
		}
		if tr.To.Terminal() || canEnd(tr.To, a, events, depth+1) {
			return true
		}
	}
	return false
}

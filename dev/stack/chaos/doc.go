// Package chaos runs seeded fault schedules against the development stack and checks fleetd's
// promise after each (issue 7; docs/security.md "What must hold"):
//
//	(a) every request fleetd accepted reaches a terminal state once the faults clear;
//	(b) exactly one Workflow is created per request, and one request per owner request;
//	(c) no disk is wiped or written without a verified attestation of the declared machine and
//	    its declared disk serial, for the same request;
//	(d) no LDevID or LAK is issued for an unapproved EK;
//	(e) nothing fleetd owns in NetBox is left inconsistent.
//
// A Schedule (Generate) is a sequence of steps over a few machines, drawn from a seed: the
// owner's requests through NetBox's REST API, the machines' netboot, first boot and boot checks,
// Workflow outcomes as Tinkerbell reports them, interleaved with faults — NetBox answering 5xx,
// slowly or past fleetd's timeout, webhooks dropped or late, the Kubernetes API server stopped
// and started again, fleetd SIGKILLed (before or after a claim, during an enrollment, between
// the attestation and the configuration's fetch) and restarted by its supervisor. A Runner plays
// a schedule on a running stack; Settle then clears the faults and lets the world finish (the
// machines netboot and boot when their requests wait for them, as real machines would); Check
// reads NetBox (the owner's REST API and its change log), the Kubernetes API (the Workflows
// carrying fleetd's labels) and the machines' directories and records, independently of fleetd's
// own view, and reports every violation.
//
// A schedule is a pure function of its seed; playing it is not (fleetd, NetBox's delivery
// workers and the reconcile run concurrently with the steps), so a replay runs the same steps
// against the same kinds of faults, not the same interleaving. `go test ./dev/stack/chaos -run
// TestChaos -seed N` replays seed N on a fresh stack.
//
// Trust: the checker trusts the stack's components (the emulator's records, the API server, the
// machines' files), never fleetd: what fleetd says about itself (its log, GET /v1/devices) is
// not evidence.
package chaos

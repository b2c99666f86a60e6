// Package chaos runs seeded fault schedules against the development stack and checks fleetd's
// promise after each (docs/security.md, "What must hold" and "Proof under faults"):
//
//	(a) every request fleetd accepted reaches a terminal state once the faults clear;
//	(b) exactly one Workflow is created per request, and one request per owner request;
//	(c) no disk is wiped or written without a verified attestation of the declared machine and
//	    its declared disk serial, for the same request;
//	(d) no LDevID or LAK is issued for an unapproved EK; none is issued or renewed for a device
//	    that is not active, and an active node never loses the ability to pass its check (it
//	    holds the certificates NetBox accepts: the current serials or the ones a renewal
//	    replaced; check_renewal.go);
//	(e) nothing fleetd owns in NetBox is left inconsistent, and no field fleetd owns keeps a value
//	    another NetBox user wrote (docs/design.md §9);
//	(f) a configuration is delivered once: the installed OS's fetch is answered with it once per
//	    request, whatever an owner's client wrote back.
//
// A Schedule (Generate) is a sequence of steps over a few machines, drawn from a seed: the
// owner's requests through NetBox's REST API, the machines' netboot, first boot and boot checks,
// Workflow outcomes as Tinkerbell reports them, an owner's client saving a copy of the device read
// steps earlier whole (pynetbox's Record.save(): every custom field with the value read, one key
// changed), interleaved with faults — NetBox answering 5xx, slowly or past fleetd's timeout,
// webhooks dropped or late, the Kubernetes API server stopped and started again, fleetd
// SIGKILLed (before or after a claim, during an enrollment, between the attestation and the
// configuration's fetch, mid-renewal) and restarted by its supervisor, and a renewal's answer
// lost (runner_renew.go). A Runner plays
// a schedule on a running stack; Settle then clears the faults and lets the world finish (the
// machines netboot and boot when their requests wait for them, as real machines would); Check
// reads NetBox (the owner's REST API and its change log), the Kubernetes API (the Workflows
// carrying fleetd's labels) and the machines' directories and records, independently of fleetd's
// own view, and reports every violation.
//
// What each step did is counted (kinds.go): a Runner plays every step through its kind's entry
// in one table and records, by coverage key, whether it happened, found nothing to act on, or
// failed. A schedule in which one of the world's own levers did not happen (an owner's PATCH, a
// NetBox fault that faulted nothing, the API server's stop or start, a SIGKILL) fails NotPlayed;
// a Tally prints the coverage of a run; CoveringSeeds picks the seeds `make test` plays so that
// every key is drawn, and that run fails unless each happened (docs/security.md "Proof under
// faults").
//
// A new kind of step: name it (schedule.go), add its entry to kinds — its variants (the Args
// drawn, each a coverage key), whether it must happen, and its play function, which returns
// its events (did, idle; a kill point riding on it adds its own) — and draw it in the
// generator (generate.go). TestGenerateShape then fails until 500 seeds draw each variant, the
// coverage table lists it, and the covering run of `make test` plays a seed that draws it
// twice and fails unless it happened. A new NetBox fault is a variant of NetBoxFault
// (netboxFaults, Runner.netboxFault); a new kill point an entry of killPoints.
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

package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// reject ends a request the declaration cannot carry: state rejected, a message naming every
// problem, desired_action cleared, a warning in the journal, and no Workflow. A retirement that is
// still rejected for the same reasons is not written again (it has no desired_action to clear).
func (s *Requests) reject(ctx context.Context, d Device, action Action, problems []string) (Outcome, error) {
	msg := rejectMessage(action, problems)
	out := outcomeFor(d, action, "claim", "rejected")
	out.Detail = msg
	if stillRejected(d, msg) {
		out.Result = "still-rejected"
		return out, nil
	}
	t, ok := Next(d.Owned.State, action, EventRejected)
	if !ok {
		return out, fmt.Errorf("reject %s on %s: no transition from %q", action, d.Name, d.Owned.State)
	}
	p := Patch{IfVersion: d.Version, ClearDesiredAction: d.Declared.DesiredAction != ActionNone,
		State: &t.To, Message: &msg}
	if _, err := s.core.update(ctx, d, p); err != nil {
		return out, fmt.Errorf("record rejection of %s on %s: %w", action, d.Name, netboxErr(err))
	}
	s.core.metrics.requests.WithLabelValues(string(action), "rejected").Inc()
	s.core.journal(ctx, d, t.Journal, msg)
	return out, nil
}

// rejectMessage is the fleet_message and journal entry of a rejected request.
func rejectMessage(action Action, problems []string) string {
	return fmt.Sprintf("%s refused: %s.", action, strings.Join(problems, "; "))
}

// stillRejected reports a rejection NetBox already holds: reject writes nothing again.
func stillRejected(d Device, msg string) bool {
	return d.Owned.State == StateRejected && d.Owned.Message == msg && d.Declared.DesiredAction == ActionNone
}

// acceptMessage is the fleet_message and journal entry of a claimed request.
func acceptMessage(action Action, req, workflow, template string) string {
	return fmt.Sprintf("%s accepted as request %s: Workflow %s from Template %s.", action, req, workflow, template)
}

// accept claims a request: a new request id, the deterministic Workflow name, state pending and
// desired_action cleared in one conditional write (If-Match on NetBox ≥ 4.6), so that of two
// concurrent claimants only one wins. The Workflow is created after the claim is durable; a crash
// in between leaves a pending request whose Workflow the next reconcile creates (follow).
func (s *Requests) accept(ctx context.Context, d Device, action Action) (Outcome, error) {
	out := outcomeFor(d, action, "claim", "accepted")
	class, _ := s.catalog.Class(d.Declared.Class) // Problems checked it exists
	req, err := NewRequestID(action, s.rnd)
	if err != nil {
		return out, err
	}
	wf := WorkflowName(d.Name, req)
	t, ok := Next(d.Owned.State, action, EventAccepted)
	if !ok {
		return out, fmt.Errorf("accept %s on %s: no transition from %q", action, d.Name, d.Owned.State)
	}
	msg := acceptMessage(action, req, wf, class.Templates[action])
	p := Patch{IfVersion: d.Version, ClearDesiredAction: d.Declared.DesiredAction != ActionNone,
		Status: t.Status, State: &t.To, Message: &msg, Request: &req, Workflow: &wf}
	claimed, err := s.core.update(ctx, d, p)
	if err != nil {
		return out, fmt.Errorf("claim %s request on %s: %w", action, d.Name, netboxErr(err))
	}
	claimed.MACs = d.MACs // Update does not read them again
	s.core.metrics.requests.WithLabelValues(string(action), "accepted").Inc()
	// The claim's journal entry and its Workflow are writes to two systems that do not depend on
	// each other: sent at once, the claim waits for the slower one, not for both in turn
	// (docs/performance.md). install waits for the entry before it records anything more, so a
	// refused Template's entry still follows the claim's.
	// A wipe or a retirement bans the device's SPIRE agents and cordons its Node from its start,
	// beside the Workflow and never before it (spireban.go, leaving.go).
	var journaled, banned sync.WaitGroup
	journaled.Go(func() { s.core.journal(ctx, claimed, t.Journal, msg) })
	var ban, cordon string
	banned.Go(func() { ban = s.banSPIRE(ctx, claimed, action) })
	banned.Go(func() { cordon = s.nodes.cordon(ctx, claimed, action) })
	_, err = s.install(ctx, claimed, action, class, journaled.Wait)
	banned.Wait()
	out.Detail = withSentence(withSentence(msg, ban), cordon)
	if err != nil {
		out.Result = "accepted-install-deferred"
		return out, err
	}
	return out, nil
}

// install creates the request's Workflow (idempotent). A Template that cannot carry the request
// fails the request; any other error leaves it pending for the next reconcile. journaled, when
// not nil, waits for a journal entry written alongside the Workflow: it returns before install
// records anything of its own.
func (s *Requests) install(ctx context.Context, d Device, action Action, class Class, journaled func()) (Outcome, error) {
	out := outcomeFor(d, action, "install", "workflow-created")
	spec := workflowSpec(s.fleetdURL, d, action, class)
	err := s.inst.Install(ctx, spec)
	if journaled != nil {
		journaled()
	}
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, ErrTemplate):
		return s.core.apply(ctx, d, action, EventWorkflowFailed, templateFailedMessage(action, d.Owned.Request, err))
	default:
		s.core.metrics.installErrors.Inc()
		out.Result = "install-deferred"
		return out, fmt.Errorf("create Workflow %s for %s: %w", spec.Name, d.Name, err)
	}
}

// workflowSpec is the Workflow of the device's claimed request.
func workflowSpec(fleetdURL string, d Device, action Action, class Class) WorkflowSpec {
	return WorkflowSpec{Name: d.Owned.Workflow, Template: class.Templates[action], Device: d, Class: class,
		Action: action, Request: d.Owned.Request, FleetdURL: fleetdURL}
}

// templateFailedMessage is the message of a request whose Template cannot carry it.
func templateFailedMessage(action Action, req string, err error) string {
	return fmt.Sprintf("%s request %s failed before anything ran: %v.", action, req, err)
}

// follow looks after a running request: creates its Workflow if the claim outlived a crash,
// and turns a terminal Workflow into the lifecycle event it means.
func (s *Requests) follow(ctx context.Context, d Device, listed workflowListing) (Outcome, error) {
	action := RequestAction(d.Owned.Request)
	out := outcomeFor(d, action, "workflow", "waiting")
	if action == ActionNone || d.Owned.Workflow == "" {
		msg := fmt.Sprintf("fleet_state is %s but fleet_request %q names no request fleetd made; the request is failed so a new one can start.",
			d.Owned.State, d.Owned.Request)
		return s.core.apply(ctx, d, action, EventWorkflowFailed, msg)
	}
	s.noteQueued(ctx, d, action)
	ban := s.banSPIRE(ctx, d, action)                       // again at each pass: a retry, or an agent that attested since
	ban = withSentence(ban, s.nodes.cordon(ctx, d, action)) // a retry of a cordon that failed
	ws, err := listed.workflow(ctx, s.inst, d.Owned.Workflow)
	switch {
	case errors.Is(err, ErrNotFound) && d.Owned.State == StatePending: // d is judged on fleetd's values (reconcile)
		class, ok := s.catalog.Class(d.Declared.Class)
		if !ok {
			msg := fmt.Sprintf("%s request %s failed: class %q is no longer in classes.json.", action, d.Owned.Request, d.Declared.Class)
			return s.core.apply(ctx, d, action, EventWorkflowFailed, msg)
		}
		return s.install(ctx, d, action, class, nil)
	case errors.Is(err, ErrNotFound):
		// Missing once its end is recorded (configuring), or read so by an instance running
		// behind the device's state, it is no event: the transition is judged on the device as
		// NetBox has it when fleetd writes.
		msg := fmt.Sprintf("%s request %s failed: its Workflow %s no longer exists in Kubernetes, and it had not ended.", action, d.Owned.Request, d.Owned.Workflow)
		return s.core.apply(ctx, d, action, EventWorkflowMissing, msg)
	case err != nil:
		out.Result = "workflow-unreadable"
		return out, fmt.Errorf("read Workflow %s of %s: %w", d.Owned.Workflow, d.Name, err)
	}
	if ws.Phase.Terminal() {
		if _, moves := Next(d.Owned.State, action, workflowEvent(ws)); moves {
			return s.workflowEnded(ctx, d, action, ws)
		}
	}
	out.Detail = withSentence("Workflow "+string(ws.Phase)+" at "+ws.CurrentAction, ban)
	if ev, msg, ends := endsRequest(d, s.core.clock.Now()); ends {
		return s.core.apply(ctx, d, action, ev, msg) // the configuration expired or an older fleetd lost it
	}
	return out, nil
}

// WorkflowChanged is the Workflow watch's entry: a Workflow of the device changed. It re-reads the
// device and applies the change if the Workflow is still the device's current one.
func (s *Requests) WorkflowChanged(ctx context.Context, id int64, ws WorkflowStatus) (Outcome, error) {
	unlock := s.core.locks.lock(id)
	defer unlock()
	d, err := s.core.netbox.Device(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Outcome{DeviceID: id, Step: "workflow", Result: "unknown-device"}, nil
	}
	if err != nil {
		return Outcome{DeviceID: id, Step: "workflow", Result: "error"}, fmt.Errorf("read device %d: %w: %w", id, ErrNetBoxUnavailable, err)
	}
	if d, err = s.core.judgedOnOwnFields(ctx, d); err != nil {
		return outcomeFor(d, ActionNone, "workflow", "refused"), err
	}
	action := RequestAction(d.Owned.Request)
	if ws.Name != d.Owned.Workflow || !ws.Phase.Terminal() {
		out := outcomeFor(d, action, "workflow", "not-current-or-running")
		return out, nil
	}
	return s.workflowEnded(ctx, d, action, ws)
}

func (s *Requests) workflowEnded(ctx context.Context, d Device, action Action, ws WorkflowStatus) (Outcome, error) {
	refused := s.refusals.take(d.ID, d.Owned.Request)
	if ws.Phase == WorkflowSucceeded {
		msg := succeededMessage(d, action, ws)
		return s.core.apply(ctx, d, action, EventWorkflowSucceeded, msg)
	}
	msg := fmt.Sprintf("%s request %s failed: Workflow %s %s", action, d.Owned.Request, ws.Name, ws.Phase)
	if ws.FailedAction != "" {
		msg += fmt.Sprintf(" at action %s", ws.FailedAction)
	}
	switch {
	case ws.Message != "":
		msg += ": " + ws.Message
	case ws.FailedAction != "":
		// Tinkerbell keeps no action's output: tink-worker v0.12.2 reports a failed action
		// without it, tink-agent v0.25 with "action completed" (docs/design.md §8).
		msg += " (Tinkerbell keeps no action output: it is in the log of the machine's worker, tink-agent or tink-worker)"
	}
	msg += "."
	if d.Owned.State == StateWiping && refused != "" { // why the receipt step failed, as fleetd refused its receipt
		msg += " " + receiptRefusalSentence(d.Name, refused)
	}
	if d.Owned.State == StatePending { // why the agent failed, as fleetd refused it: the last refusal this fleetd saw, or the one NetBox holds
		if refused == "" {
			refused, _ = recordedRefusal(d.Owned.Message)
		}
		if refused != "" {
			msg += " " + refusalSentence(d.Name, refused)
		}
	}
	msg += " " + retryHint(action)
	return s.core.apply(ctx, d, action, EventWorkflowFailed, msg)
}

func workflowEvent(ws WorkflowStatus) Event {
	if ws.Phase == WorkflowSucceeded {
		return EventWorkflowSucceeded
	}
	return EventWorkflowFailed
}

func succeededMessage(d Device, action Action, ws WorkflowStatus) string {
	switch {
	case d.Owned.State == StatePending:
		return fmt.Sprintf("%s request %s failed: Workflow %s succeeded but the machine never attested (its Template must run fleetd enroll first); nothing was authorized.",
			action, d.Owned.Request, ws.Name)
	case d.Owned.State == StateWiping:
		return unconfirmedMessage(d, action, ws.Name) // a receipt ends a wipe before its Workflow does (receipt.go)
	case action == ActionProvision:
		return fmt.Sprintf("Workflow %s succeeded: the OS is written and the machine reboots into it; its configuration waits to be fetched once.", ws.Name)
	}
	return fmt.Sprintf("Workflow %s succeeded.", ws.Name)
}

// transitionPatch is the write of transition t on device d with message msg.
func transitionPatch(d Device, t Transition, msg string) Patch {
	return withTransition(Patch{}, d, t, msg)
}

// withTransition adds transition t's state, status and message to p. A device the owner set to
// decommissioning keeps that status (docs/design.md §2): the retirement is taken once the running
// request ends. A transition that ends the device's identity clears its certificate serials and
// its identity material.
func withTransition(p Patch, d Device, t Transition, msg string) Patch {
	p.State, p.Message, p.Status = &t.To, &msg, t.Status
	if d.Status == StatusDecommissioning {
		p.Status = ""
	}
	if t.ClearCerts {
		empty := ""
		p.LDevIDSerial, p.LAKSerial, p.Identity = &empty, &empty, &IdentityMaterial{}
		p.LDevIDSerialPrevious, p.LAKSerialPrevious = &empty, &empty
	}
	return p
}

// netboxErr marks a NetBox write error as ErrNetBoxUnavailable, except a conflict, which the caller
// redoes.
func netboxErr(err error) error {
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrNetBoxUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNetBoxUnavailable, err)
}

// retryHint says how the owner asks again after a failed request: a failed request is never
// retried on its own (docs/runbooks.md), and a retirement is asked again with desired_action=wipe
// on the decommissioning device (requested).
func retryHint(action Action) string {
	if action == ActionRetire {
		return "To retry the retirement, set desired_action=wipe on the decommissioning device."
	}
	return fmt.Sprintf("To try again, fix the cause and set desired_action=%s.", action)
}

// noteQueued journals a request the owner made while another runs (a desired_action, or the
// status decommissioning): it waits, and starts when the running one ends, so the journal says so
// and how to cancel it before then. Once per running request and queued action in this process
// (a restart or another instance says it once more). A desired_action a client wrote back with an
// old copy is cleared before this runs (the repair of the reconcile's read, repair.go), so it
// never passes for a queued request.
func (s *Requests) noteQueued(ctx context.Context, d Device, running Action) {
	q := requested(d)
	if q == ActionNone {
		return
	}
	if _, seen := s.queued.LoadOrStore(fmt.Sprintf("%d %s %s", d.ID, d.Owned.Request, q), true); seen {
		return
	}
	s.core.journal(ctx, d, JournalInfo, queuedMessage(d, q, running))
}

// queuedMessage says that request q waits for the running one, and how to cancel it.
func queuedMessage(d Device, q, running Action) string {
	cancel := "clear desired_action to cancel it before then"
	if q == ActionRetire && d.Declared.DesiredAction == ActionNone {
		cancel = "set the status back from decommissioning to cancel it before then"
	}
	return fmt.Sprintf("%s waits for %s request %s (fleet_state %s): it starts when that request ends; %s.",
		q, running, d.Owned.Request, d.Owned.State, cancel)
}

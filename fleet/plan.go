package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A plan is what fleetd would do for a device's request, decided by the functions the request
// path itself decides with (requested, checks, Next, the messages of reject and accept, the
// installer's own Template check) and writing nothing: no NetBox write, no journal entry, no
// Workflow or Hardware, no Kea reservation (docs/http.md "Plan a request"). What the claim draws
// at random (the request id, and with it the Workflow name's suffix) is shown as a pattern.

// Review answers the operator's two questions that change nothing: what a request would do
// (Plan, decided by the functions the request itself runs), and where NetBox and the machines
// disagree (InventoryCheck, docs/design.md §10).
type Review struct {
	core        *core
	inst        Installer
	catalog     Catalog
	attest      Attestation
	changes     ChangeLog     // nil: declaration changes are not read
	fleetdURL   string        // Config.FleetdURL, for the Workflow a plan previews
	serviceUser string        // fleetd's own NetBox user (Config.ServiceUser)
	window      time.Duration // Config.InventoryBootCheckWindow, defaulted
	retention   time.Duration // Config.ChangeLogRetention, defaulted
	afterSweep  func()        // Config.AfterSweep, or nothing
}

// InstallPreviewer is an Installer that can check a request's Workflow as Install would,
// writing nothing.
//
// Errors: a wrapped ErrTemplate is the refusal Install would give; anything else means the
// Kubernetes API could not be read, and the plan says the Template was not checked.
type InstallPreviewer interface {
	PreviewInstall(ctx context.Context, w WorkflowSpec) error
}

// PlanOutcome is what the next step of the planned request would do.
type PlanOutcome string

const (
	PlanAccepted      PlanOutcome = "accepted"       // the claim takes the request and creates its Workflow
	PlanTemplateFails PlanOutcome = "template-fails" // claimed, then the Template refuses it: the request fails before anything runs
	PlanRejected      PlanOutcome = "rejected"       // the declaration cannot carry it: rejected, nothing runs
	PlanStillRejected PlanOutcome = "still-rejected" // NetBox holds this very rejection already: nothing is written
	PlanWaits         PlanOutcome = "waits"          // another request runs: this one starts when it ends
	PlanRunning       PlanOutcome = "running"        // the device's current request runs; what is left of it
	PlanNothing       PlanOutcome = "nothing-to-do"  // NetBox asks for nothing and no action was given
)

// PlanRequestSuffix stands for the 8 random characters the claim draws for a request id.
const PlanRequestSuffix = "<8 chars>"

// Plan is what fleetd would do for one device's request.
type Plan struct {
	Device  string
	Action  Action // ActionNone when there is nothing to plan
	Asked   bool   // the action was given by the caller, not read from NetBox
	State   State  // the device's fleet_state now
	Outcome PlanOutcome
	Why     string // one sentence: why nothing happens, why it waits, or how the action was read
	// Repair is the write fleetd makes first when it does not vouch for the fields it owns
	// (trust.go): the plan is of the device after it. "" when there is none.
	Repair string
	Checks []PlanCheck
	// Write is the one conditional write the claim (or the rejection) makes, with its journal
	// entry; nil when nothing would be written.
	Write    *PlanWrite
	Workflow *PlanWorkflow
	// Enrollment is what the machine must prove when its agent enrolls, each with the code and
	// fixed sentence of the refusal it would get otherwise.
	Enrollment   []PlanCheck
	Disk         *PlanDisk
	Config       *PlanConfig // a provision's configuration
	Certificates []PlanCertificate
	Then         []PlanStep // the lifecycle after the claim, as Next has it, when every step succeeds
	OnRefusal    *PlanStep  // where a refused enrollment or a failed Workflow leaves the request
	// OnNoReceipt is where a wipe or a retirement whose Workflow succeeds with no verified
	// receipt recorded ends (unconfirmed); nil for another action.
	OnNoReceipt *PlanStep
}

// PlanCheck is one check a request passes or fails.
type PlanCheck struct {
	Name   string
	Result string // pass, fail, unchecked, at-enrollment
	Detail string
	Code   string // the refusal code (enrollment checks)
}

// Plan check results.
const (
	CheckPass         = "pass"
	CheckFail         = "fail"
	CheckUnchecked    = "unchecked"
	CheckAtEnrollment = "at-enrollment"
)

// PlanWrite is one NetBox write of a plan and its journal entry (the message).
type PlanWrite struct {
	State              State
	Status             Status // "" leaves the status alone
	Request, Workflow  string // patterns; "" when not written
	ClearDesiredAction bool
	Message            string
	Journal            JournalKind
}

// PlanWorkflow is the Workflow the claim creates.
type PlanWorkflow struct {
	Name, Template string
	// Problem is the fleet_message and journal entry of the request's failure when the
	// Template check refuses it (the request fails before anything runs).
	Problem string
}

// PlanDisk is the disk the agent must find, and whether the request erases it.
type PlanDisk struct {
	Serial string
	Erased bool
}

// PlanConfig is the configuration a provision delivers once.
type PlanConfig struct {
	Kind        Kind
	Route       string
	FetchSecret bool
}

// PlanCertificate is a certificate a provision issues.
type PlanCertificate struct {
	Profile              string
	Lifetime, RenewAfter string // "" when fleetd has no issuer (a test)
}

// PlanStep is one lifecycle step.
type PlanStep struct {
	Event      Event
	State      State
	Status     Status
	ClearCerts bool
}

// Plan decides what the named device's request would do: the request NetBox holds, or asked
// (ActionNone: NetBox's), writing nothing.
func (s *Review) Plan(ctx context.Context, name string, asked Action) (Plan, error) {
	if asked != ActionNone && !validAction(asked) {
		return Plan{}, Refuse(RefusedInvalid, "unknown_action", "action %q is not one of provision, attest, wipe, retire", asked)
	}
	d, err := s.core.netbox.DeviceByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return Plan{}, Refuse(RefusedNotFound, "unknown_device", "NetBox has no device named %q", name)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("read device %q: %w: %w", name, ErrNetBoxUnavailable, err)
	}
	d, repair := repaired(d)
	p := s.plan(ctx, d, asked)
	p.Repair = repair
	return p, nil
}

func (s *Review) plan(ctx context.Context, d Device, asked Action) Plan {
	p := Plan{Device: d.Name, Asked: asked != ActionNone, State: d.Owned.State}
	sim := asking(d, asked)
	action := requested(sim)
	running := RequestAction(d.Owned.Request)
	switch {
	case !d.Owned.State.Terminal() && (asked == ActionNone || action == ActionNone):
		return s.planRunning(d, p)
	case action == ActionNone:
		p.Outcome, p.Why = PlanNothing, nothingWhy(d, asked)
		return p
	case !d.Owned.State.Terminal():
		p.Action, p.Outcome, p.Why = action, PlanWaits, queuedMessage(sim, action, running)
		return p
	}
	p.Action = action
	switch {
	case asked == ActionWipe && action == ActionRetire:
		p.Why = "on a decommissioning device, wipe asks for the retirement again"
	case asked == ActionRetire && d.Status != StatusDecommissioning:
		p.Why = fmt.Sprintf("planned as if the owner set the status from %s to decommissioning, which is how a retirement is asked", d.Status)
	}
	checks := requestChecks(s.catalog, sim, action)
	p.Checks = append(planChecks(checks), PlanCheck{Name: "state", Result: CheckPass,
		Detail: fmt.Sprintf("fleet_state %s ends any request: a new one may start", stateWord(d.Owned.State))})
	if problems := problemsOf(checks); len(problems) > 0 {
		return planRejected(sim, action, problems, p)
	}
	class, _ := s.catalog.Class(sim.Declared.Class)
	s.planClaim(ctx, sim, action, class, &p)
	p.Enrollment = s.enrollmentChecks(sim, action, class, WorkflowName(d.Name, requestPattern(action)))
	planWork(sim, action, class, &p, s.attest)
	return p
}

// asking is the device as NetBox would hold it once the owner asked for action: desired_action
// set, or for a retirement the status decommissioning.
func asking(d Device, action Action) Device {
	switch action {
	case ActionNone:
	case ActionRetire:
		d.Status, d.Declared.DesiredAction = StatusDecommissioning, ActionNone
	default:
		d.Declared.DesiredAction = action
	}
	return d
}

func nothingWhy(d Device, asked Action) string {
	switch {
	case asked == ActionNone:
		return "NetBox asks for nothing: desired_action is empty and the status is not decommissioning; give an action to plan one"
	case d.Owned.State == StateRetired:
		return "the device is retired already: its disk was wiped and the machine powered off"
	}
	return fmt.Sprintf("the last request %s was a retirement (fleet_state %s), which is not taken again on its own. %s",
		d.Owned.Request, stateWord(d.Owned.State), retryHint(ActionRetire))
}

// requestPattern is a request id of action with its random part as a pattern.
func requestPattern(action Action) string { return string(action) + "-" + PlanRequestSuffix }

// planSampleSuffix stands for the random part where the Template must render with a real id.
const planSampleSuffix = "xxxxxxxx"

func planChecks(checks []DeclarationCheck) []PlanCheck {
	out := make([]PlanCheck, 0, len(checks)+1)
	for _, c := range checks {
		pc := PlanCheck{Name: c.Name, Result: CheckPass, Detail: c.Passed}
		if c.Problem != "" {
			pc.Result, pc.Detail = CheckFail, c.Problem
		}
		out = append(out, pc)
	}
	return out
}

func planRejected(d Device, action Action, problems []string, p Plan) Plan {
	msg := rejectMessage(action, problems)
	t, _ := Next(d.Owned.State, action, EventRejected) // terminal: plan checked it
	p.Outcome = PlanRejected
	if stillRejected(d, msg) {
		p.Outcome = PlanStillRejected
		return p
	}
	p.Write = &PlanWrite{State: t.To, ClearDesiredAction: d.Declared.DesiredAction != ActionNone, Message: msg, Journal: t.Journal}
	return p
}

// planClaim is the claim's write and the Workflow it creates, checked as Install checks it.
func (s *Review) planClaim(ctx context.Context, d Device, action Action, class Class, p *Plan) {
	req := requestPattern(action)
	wf := WorkflowName(d.Name, req)
	t, _ := Next(d.Owned.State, action, EventAccepted)
	p.Outcome = PlanAccepted
	p.Write = &PlanWrite{State: t.To, Status: t.Status, Request: req, Workflow: wf,
		ClearDesiredAction: d.Declared.DesiredAction != ActionNone,
		Message:            acceptMessage(action, req, wf, class.Templates[action]), Journal: t.Journal}
	p.Workflow = &PlanWorkflow{Name: wf, Template: class.Templates[action]}
	check := PlanCheck{Name: "template", Result: CheckUnchecked, Detail: "this installer cannot check a Template without creating the Workflow"}
	if pv, ok := s.inst.(InstallPreviewer); ok {
		sample := string(action) + "-" + planSampleSuffix
		claimed := d
		claimed.Owned.Request, claimed.Owned.Workflow = sample, WorkflowName(d.Name, sample)
		err := pv.PreviewInstall(ctx, workflowSpec(s.fleetdURL, claimed, action, class))
		switch {
		case err == nil:
			check.Result, check.Detail = CheckPass, fmt.Sprintf("Template %s renders with the Workflow's hardwareMap and carries the request", class.Templates[action])
		case errors.Is(err, ErrTemplate):
			check.Result = CheckFail
			check.Detail = strings.ReplaceAll(err.Error(), sample, req)
			p.Workflow.Problem = strings.ReplaceAll(templateFailedMessage(action, sample, err), sample, req)
			p.Outcome = PlanTemplateFails
		default:
			check.Detail = fmt.Sprintf("the Kubernetes API could not be read, so the Template was not checked: %v", err)
		}
	}
	p.Checks = append(p.Checks, check)
}

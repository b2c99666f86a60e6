package fleet

import (
	"fmt"
	"strings"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// planRunning is what is left of the request the device carries now.
func (s *Review) planRunning(d Device, p Plan) Plan {
	action := RequestAction(d.Owned.Request)
	p.Action, p.Outcome = action, PlanRunning
	p.Why = fmt.Sprintf("%s request %s runs (fleet_state %s); nothing new starts until it ends", action, d.Owned.Request, d.Owned.State)
	if w := JoinWait(d); w != "" {
		p.Why += "; it is joining the cluster: " + w
	}
	if q := requested(d); q != ActionNone {
		p.Why += "; " + queuedMessage(d, q, action)
	}
	class, ok := s.catalog.Class(d.Declared.Class)
	if action == ActionNone || !ok {
		return p // the reconcile fails it (follow): nothing fleetd made, or a class gone
	}
	p.Workflow = &PlanWorkflow{Name: d.Owned.Workflow, Template: class.Templates[action]}
	if d.Owned.State == StatePending {
		p.Enrollment = s.enrollmentChecks(d, action, class, d.Owned.Workflow)
	}
	planWork(d, action, class, &p, s.attest)
	p.Then = stepsFrom(d, d.Owned.State, action, class)
	return p
}

// enrollmentChecks is what the agent's enrollment must prove, in the order EnrollChallenge and
// EnrollEvidence check it, each with the code of the refusal it would get (its fixed sentence is
// PublicSentence(code)). Those that depend on fleetd's configuration (the EK policy, the boot
// policy) say what it holds now; a boot policy that allows no boot fails every enrollment.
func (s *Review) enrollmentChecks(d Device, action Action, class Class, workflow string) []PlanCheck {
	at := func(code, detail string) PlanCheck {
		return PlanCheck{Name: code, Result: CheckAtEnrollment, Detail: detail, Code: code}
	}
	c := []PlanCheck{
		at("request_mismatch", fmt.Sprintf("the agent must name the device's request, as Workflow %s passes it (FLEETD_REQUEST)", workflow)),
		at(string(attest.CheckTPMVersion), "the machine must have a TPM 2.0"),
		at(string(attest.CheckEKApproved), fmt.Sprintf("the SHA-256 of the machine's EK must be one of the %d in ek_sha256", len(d.Declared.EKHashes))),
		s.ekCertCheck(d),
		at(string(attest.CheckActivation), "the attestation key must decrypt the credential: it lives in the TPM of that EK"),
		at(string(attest.CheckQuote), "the quote must be signed by that key over fleetd's nonce, and the event log replay to its PCRs"),
		secureBootCheck(class),
		s.bootPolicyCheck(class),
		at(string(attest.CheckLDevID), "the LDevID key must be certified by the attestation key over fleetd's nonce"),
		at(string(attest.CheckDiskAbsent), fmt.Sprintf("the agent must find disk_serial %s exactly once among the machine's disks (none: %s; two or more: %s)",
			strings.TrimSpace(d.Declared.DiskSerial), attest.CheckDiskAbsent, attest.CheckDiskAmbiguous)),
	}
	if action == ActionProvision {
		c = append(c, at("config_rejected", fmt.Sprintf("the %s configuration rendered with the new LAK files must be one the OS accepts", class.Kind)))
	}
	return c
}

func (s *Review) ekCertCheck(d Device) PlanCheck {
	c := PlanCheck{Name: "ek_certificate", Result: CheckAtEnrollment}
	switch {
	case s.attest.EK == nil:
		c.Result, c.Detail = CheckUnchecked, "fleetd has no EK policy"
	case s.attest.EK.Policy() == attest.EKPolicyHash:
		c.Detail = "EK policy hash: the EK is approved by its hash alone, a certificate is not looked at"
	case d.Declared.EKCert == EKCertNone:
		c.Detail = "EK policy hash+cert, and ek_certificate none: the EK is approved by its hash alone"
	default:
		c.Code = string(attest.CheckEKCertChain)
		c.Detail = fmt.Sprintf("EK policy hash+cert: the machine must send its EK certificate (else %s), for the EK (else %s), chaining to the manufacturer CA bundle",
			attest.CheckEKCertMissing, attest.CheckEKCertKey)
	}
	return c
}

func secureBootCheck(class Class) PlanCheck {
	c := PlanCheck{Name: "secure_boot", Result: CheckAtEnrollment}
	if class.SecureBoot == SecureBootRequired {
		c.Code = string(attest.CheckSecureBoot)
		c.Detail = fmt.Sprintf("class %s requires Secure Boot: the verified event log must show it enabled", class.Name)
		return c
	}
	c.Detail = fmt.Sprintf("class %s records Secure Boot and does not require it", class.Name)
	return c
}

func (s *Review) bootPolicyCheck(class Class) PlanCheck {
	c := PlanCheck{Name: string(attest.CheckBootPolicy), Result: CheckAtEnrollment, Code: string(attest.CheckBootPolicy)}
	bp := s.attest.BootPolicy
	if bp == nil {
		c.Result, c.Detail = CheckFail, errNoBootPolicy.Error()
		return c
	}
	whose := "the fleet's list"
	for _, own := range bp.Classes() {
		if own == class.Name {
			whose = "class " + class.Name + "'s own list"
		}
	}
	n := bp.Boots(class.Name)
	c.Detail = fmt.Sprintf("the verified HookOS boot must be one of the %d boots %s allows", n, whose)
	if n == 0 {
		c.Result, c.Detail = CheckFail, fmt.Sprintf("%s allows no boot: every enrollment is refused", whose)
	}
	return c
}

// planWork fills in what the request touches: the disk, a provision's configuration and
// certificates, the lifecycle after the claim, and where a refusal leaves it.
func planWork(d Device, action Action, class Class, p *Plan, att Attestation) {
	p.Disk = &PlanDisk{Serial: strings.TrimSpace(d.Declared.DiskSerial), Erased: action != ActionAttest}
	if action == ActionProvision {
		p.Config = &PlanConfig{Kind: class.Kind, Route: "/v1/config/" + class.Kind.Route(), FetchSecret: class.Kind.CarriesFetchSecret()}
		for _, prof := range []pki.Profile{pki.ProfileLDevID, pki.ProfileLAK} {
			pc := PlanCertificate{Profile: string(prof)}
			if att.Issuer != nil {
				life, renew := att.Issuer.Lifetimes(prof)
				pc.Lifetime, pc.RenewAfter = life.String(), renew.String()
			}
			p.Certificates = append(p.Certificates, pc)
		}
	}
	if p.Outcome == PlanRunning {
		return
	}
	if p.Outcome == PlanTemplateFails {
		t, _ := Next(StatePending, action, EventWorkflowFailed)
		step := stepOf(d, EventWorkflowFailed, t)
		p.Then, p.Disk, p.Config, p.Certificates = []PlanStep{step}, nil, nil, nil
		return
	}
	p.Then = stepsFrom(d, StatePending, action, class)
	if t, ok := Next(StatePending, action, EventRefused); ok {
		step := stepOf(d, EventRefused, t)
		p.OnRefusal = &step
	}
	if t, ok := Next(StateWiping, action, EventWorkflowSucceeded); ok && (action == ActionWipe || action == ActionRetire) {
		step := stepOf(d, EventWorkflowSucceeded, t)
		p.OnNoReceipt = &step
	}
}

// stepsFrom walks the lifecycle (Next) from state through the events of a request that
// succeeds: attested, then a wipe's verified receipt, the Workflow's success and the delivery,
// in the order the class kind sees them (a NoCloud install delivers during its Workflow). An
// event that does not move the request (a wipe's Workflow success after its receipt) is no step.
func stepsFrom(d Device, from State, action Action, class Class) []PlanStep {
	events := []Event{EventAttested, EventReceiptVerified, EventWorkflowSucceeded, EventDelivered}
	if class.JoinsKubernetes {
		events = []Event{EventAttested, EventReceiptVerified, EventWorkflowSucceeded, EventDeliveredJoining, EventNodeReady}
	}
	if class.Kind == KindCloudInit {
		events = []Event{EventAttested, EventDelivered, EventWorkflowSucceeded}
	}
	var steps []PlanStep
	for _, ev := range events {
		t, ok := Next(from, action, ev)
		if !ok {
			continue
		}
		steps = append(steps, stepOf(d, ev, t))
		from = t.To
	}
	return steps
}

// stepOf is transition t as the device would take it (withTransition keeps a decommissioning
// device's status).
func stepOf(d Device, ev Event, t Transition) PlanStep {
	p := withTransition(Patch{}, d, t, "")
	return PlanStep{Event: ev, State: t.To, Status: p.Status, ClearCerts: t.ClearCerts}
}

package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/folly-infra/fleetd/api"
)

// printPlan writes a plan for a person: the outcome first, then every check, the write and
// journal entry, the Workflow, the disk, and the lifecycle after the claim.
func printPlan(w io.Writer, p api.Plan) {
	what := p.Action
	if what == "" {
		what = "no request"
	}
	from := "the request NetBox holds"
	if p.Asked {
		from = "asked with --action"
	}
	fmt.Fprintf(w, "plan %s: %s (%s; fleet_state %s): %s\n", p.Device, what, from, p.State, p.Outcome)
	if p.Repair != "" {
		fmt.Fprintf(w, "  first: %s\n", p.Repair)
	}
	if p.Why != "" {
		fmt.Fprintf(w, "  %s\n", p.Why)
	}
	printChecks(w, "checks now", p.Checks)
	if wr := p.Write; wr != nil {
		fmt.Fprintf(w, "writes (one conditional write): fleet_state %s", wr.State)
		if wr.Status != "" {
			fmt.Fprintf(w, ", status %s", wr.Status)
		}
		if wr.Request != "" {
			fmt.Fprintf(w, ", fleet_request %s, fleet_workflow %s", wr.Request, wr.Workflow)
		}
		if wr.ClearDesiredAction {
			fmt.Fprint(w, ", desired_action cleared")
		}
		fmt.Fprintf(w, "\n  fleet_message and journal (%s): %s\n", wr.Journal, wr.Message)
	}
	if wf := p.Workflow; wf != nil {
		fmt.Fprintf(w, "Workflow %s from Template %s\n", wf.Name, wf.Template)
		if wf.Problem != "" {
			fmt.Fprintf(w, "  then fails before anything runs: %s\n", wf.Problem)
		}
	}
	if d := p.Disk; d != nil {
		verb := "must find (and leaves untouched)"
		if d.Erased {
			verb = "ERASES"
		}
		fmt.Fprintf(w, "disk: %s disk_serial %s; the agent must find it exactly once among the machine's disks, else nothing is wiped\n", verb, d.Serial)
	}
	if c := p.Config; c != nil {
		secret := "no fetch secret"
		if c.FetchSecret {
			secret = "with a one-time fetch secret"
		}
		fmt.Fprintf(w, "configuration: %s, fetched once from %s, %s\n", c.Kind, c.Route, secret)
	}
	for _, c := range p.Certificates {
		fmt.Fprintf(w, "certificate: %s (serial drawn at issue)", c.Profile)
		if c.Lifetime != "" {
			fmt.Fprintf(w, ", lifetime %s, renewed after %s", c.Lifetime, c.RenewAfter)
		}
		fmt.Fprintln(w)
	}
	printChecks(w, "at enrollment the machine must prove", p.Enrollment)
	if len(p.Then) > 0 {
		steps := make([]string, len(p.Then))
		for i, s := range p.Then {
			steps[i] = stepText(s)
		}
		fmt.Fprintf(w, "then: %s\n", strings.Join(steps, "; "))
	}
	if p.OnRefusal != nil {
		fmt.Fprintf(w, "on a refusal or a failed Workflow: %s\n", stepText(*p.OnRefusal))
	}
	if p.OnNoReceipt != nil {
		fmt.Fprintf(w, "on a Workflow's success with no verified receipt: %s\n", stepText(*p.OnNoReceipt))
	}
}

func printChecks(w io.Writer, title string, cs []api.PlanCheck) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, c := range cs {
		fmt.Fprintf(w, "  %-13s %-18s %s\n", c.Result, c.Name, c.Detail)
		if c.Refusal != "" && c.Result != "pass" {
			fmt.Fprintf(w, "  %-13s %-18s refused %s: %s\n", "", "", c.Code, c.Refusal)
		}
	}
}

// stepText is one lifecycle step, "event → state (status …)".
func stepText(s api.PlanStep) string {
	t := s.Event + " → " + s.State
	if s.Status != "" {
		t += " (status " + s.Status + ")"
	}
	if s.ClearCerts {
		t += ", certificates cleared"
	}
	return t
}

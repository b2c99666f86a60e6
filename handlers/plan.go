package handlers

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// planDevice answers what the device's request, or ?action=, would do; it writes nothing.
func (s *Server) planDevice(w http.ResponseWriter, r *http.Request) {
	p, err := s.deps.Review.Plan(r.Context(), mux.Vars(r)["name"], fleet.Action(r.URL.Query().Get("action")))
	if err != nil {
		writeError(w, s.log(w), err)
		return
	}
	writeJSON(w, http.StatusOK, planJSON(p))
}

func planJSON(p fleet.Plan) api.Plan {
	j := api.Plan{Device: p.Device, Action: string(p.Action), Asked: p.Asked, State: string(p.State), Outcome: string(p.Outcome),
		Why: p.Why, Repair: p.Repair, Checks: checksJSON(p.Checks), Enrollment: checksJSON(p.Enrollment)}
	if j.State == "" {
		j.State = stateNone
	}
	if w := p.Write; w != nil {
		j.Write = &api.PlanWrite{State: string(w.State), Status: string(w.Status), Request: w.Request, Workflow: w.Workflow,
			ClearDesiredAction: w.ClearDesiredAction, Message: w.Message, Journal: string(w.Journal)}
	}
	if wf := p.Workflow; wf != nil {
		j.Workflow = &api.PlanWorkflow{Name: wf.Name, Template: wf.Template, Problem: wf.Problem}
	}
	if d := p.Disk; d != nil {
		j.Disk = &api.PlanDisk{Serial: d.Serial, Erased: d.Erased}
	}
	if c := p.Config; c != nil {
		j.Config = &api.PlanConfig{Kind: string(c.Kind), Route: c.Route, FetchSecret: c.FetchSecret}
	}
	for _, c := range p.Certificates {
		j.Certificates = append(j.Certificates, api.PlanCertificate{Profile: c.Profile, Lifetime: c.Lifetime, RenewAfter: c.RenewAfter})
	}
	for _, st := range p.Then {
		j.Then = append(j.Then, stepJSON(st))
	}
	if p.OnRefusal != nil {
		st := stepJSON(*p.OnRefusal)
		j.OnRefusal = &st
	}
	if p.OnNoReceipt != nil {
		st := stepJSON(*p.OnNoReceipt)
		j.OnNoReceipt = &st
	}
	return j
}

func checksJSON(cs []fleet.PlanCheck) []api.PlanCheck {
	var out []api.PlanCheck
	for _, c := range cs {
		pc := api.PlanCheck{Name: c.Name, Result: c.Result, Detail: c.Detail, Code: c.Code}
		if c.Code != "" {
			pc.Refusal = fleet.PublicSentence(c.Code)
		}
		out = append(out, pc)
	}
	return out
}

func stepJSON(st fleet.PlanStep) api.PlanStep {
	return api.PlanStep{Event: string(st.Event), State: string(st.State), Status: string(st.Status), ClearCerts: st.ClearCerts}
}

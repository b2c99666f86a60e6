package api

// Plan is the body of GET /v1/devices/{name}/plan (docs/http.md "Plan a request"): what fleetd
// would do for the device's request, written nowhere. `fleetd plan` prints it.
type Plan struct {
	Device       string            `json:"device"`
	Action       string            `json:"action,omitempty"`
	Asked        bool              `json:"asked"`
	State        string            `json:"state"`
	Outcome      string            `json:"outcome"`
	Why          string            `json:"why,omitempty"`
	Repair       string            `json:"repair,omitempty"`
	Checks       []PlanCheck       `json:"checks,omitempty"`
	Write        *PlanWrite        `json:"write,omitempty"`
	Workflow     *PlanWorkflow     `json:"workflow,omitempty"`
	Enrollment   []PlanCheck       `json:"enrollment,omitempty"`
	Disk         *PlanDisk         `json:"disk,omitempty"`
	Config       *PlanConfig       `json:"config,omitempty"`
	Certificates []PlanCertificate `json:"certificates,omitempty"`
	Then         []PlanStep        `json:"then,omitempty"`
	OnRefusal    *PlanStep         `json:"on_refusal,omitempty"`
	OnNoReceipt  *PlanStep         `json:"on_no_receipt,omitempty"`
}

// PlanCheck is one check: result pass, fail, unchecked or at-enrollment; refusal is the fixed
// sentence of code.
type PlanCheck struct {
	Name    string `json:"name"`
	Result  string `json:"result"`
	Detail  string `json:"detail,omitempty"`
	Code    string `json:"code,omitempty"`
	Refusal string `json:"refusal,omitempty"`
}

// PlanWrite is the one NetBox write the next step makes, and its journal entry (message).
type PlanWrite struct {
	State              string `json:"fleet_state"`
	Status             string `json:"status,omitempty"`
	Request            string `json:"fleet_request,omitempty"`
	Workflow           string `json:"fleet_workflow,omitempty"`
	ClearDesiredAction bool   `json:"clears_desired_action"`
	Message            string `json:"message"`
	Journal            string `json:"journal_kind"`
}

// PlanWorkflow is the Workflow the claim creates; problem is the request's failure when its
// Template refuses it.
type PlanWorkflow struct {
	Name     string `json:"name"`
	Template string `json:"template"`
	Problem  string `json:"problem,omitempty"`
}

// PlanDisk is the declared disk the agent must find exactly once, and whether it is erased.
type PlanDisk struct {
	Serial string `json:"serial"`
	Erased bool   `json:"erased"`
}

// PlanConfig is a provision's configuration, delivered once.
type PlanConfig struct {
	Kind        string `json:"kind"`
	Route       string `json:"route"`
	FetchSecret bool   `json:"fetch_secret"`
}

// PlanCertificate is a certificate profile a provision issues.
type PlanCertificate struct {
	Profile    string `json:"profile"`
	Lifetime   string `json:"lifetime,omitempty"`
	RenewAfter string `json:"renew_after,omitempty"`
}

// PlanStep is one lifecycle step after the claim.
type PlanStep struct {
	Event      string `json:"event"`
	State      string `json:"fleet_state"`
	Status     string `json:"status,omitempty"`
	ClearCerts bool   `json:"clears_certificates,omitempty"`
}

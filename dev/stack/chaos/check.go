package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

// Parts of the promise (package comment).
const (
	PartTerminal   = "a/terminal"
	PartWorkflow   = "b/one-workflow"
	PartWipe       = "c/wipe-authorized"
	PartCerts      = "d/certificates"
	PartConsistent = "e/netbox-consistent"
	PartDelivered  = "f/delivered-once"
)

// Violation is one broken part of the promise.
type Violation struct {
	Part   string
	Device string
	What   string
	// Unended is set on the one violation that holds only of a stack at rest: the device's
	// request has not ended. make load's LOAD_PHASES=storms stops with every request pending
	// on purpose, and counts these apart.
	Unended bool
}

func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Part, v.Device, v.What) }

// Sources are what Check reads: NetBox (the owner's REST API and the emulator's change log),
// the Kubernetes API, and the machines' directories.
type Sources struct {
	NetBox      *netboxemu.Emulator
	Owner       *stack.Owner
	Kube        client.Client
	Namespace   string
	Machines    map[string]stack.Machine // by device name
	ServiceUser string                   // fleetd's NetBox user: its saves are fleetd's
}

// StackSources are a running stack's sources.
func StackSources(s *stack.Stack) Sources {
	return Sources{NetBox: s.NetBox(), Owner: s.Owner(), Kube: s.Kube(), Namespace: s.Info().Namespace,
		Machines: s.Info().Machines, ServiceUser: stack.ServiceUser}
}

// Check reads the sources as they are now — NetBox's devices through the owner's REST API and
// their whole change log, every Workflow carrying fleetd's device label, and the machines'
// records and files — and returns every violation of the promise over the whole history. Call
// it once the world is at rest (Settle). The error is about reading, never about the promise.
func Check(ctx context.Context, src Sources) ([]Violation, error) {
	r, err := CheckReport(ctx, src)
	return r.Violations, err
}

// Report is what Check found, and how often the history met what promise (e) is about.
type Report struct {
	Violations []Violation
	// ForeignWrites are the saves by another NetBox user than fleetd that changed a field fleetd
	// owns (a client writing back a stale copy); Restores the saves by fleetd that put back a
	// value of its own such a save had changed.
	ForeignWrites, Restores int
}

// CheckReport is Check with the counts of its Report.
func CheckReport(ctx context.Context, src Sources) (Report, error) {
	e, err := gather(ctx, src)
	if err != nil {
		return Report{}, err
	}
	var r Report
	for _, d := range e.devices {
		h := e.history(d)
		r.ForeignWrites, r.Restores = r.ForeignWrites+h.foreignWrites, r.Restores+h.restores
		r.Violations = append(r.Violations, h.violations...)
		r.Violations = append(r.Violations, e.checkNow(d, h)...)
		r.Violations = append(r.Violations, e.checkWorkflows(d, h)...)
		r.Violations = append(r.Violations, e.checkRenewalJournal(d, h)...)
		if m, ok := src.Machines[d.Name]; ok {
			r.Violations = append(r.Violations, e.checkMachine(d, m, h)...)
			r.Violations = append(r.Violations, checkNodeCerts(d, m)...)
		}
	}
	r.Violations = append(r.Violations, e.checkOrphans()...)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Device < r.Violations[j].Device })
	return r, nil
}

// evidence is everything the checker read.
type evidence struct {
	src       Sources
	devices   []stack.OwnerDevice
	workflows map[string][]tinkerbell.Workflow // by request label
	histories map[int64]*history
}

func gather(ctx context.Context, src Sources) (*evidence, error) {
	devices, err := src.Owner.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("check: read NetBox's devices: %w", err)
	}
	var list tinkerbell.WorkflowList
	if err := src.Kube.List(ctx, &list, client.InNamespace(src.Namespace), client.HasLabels{workflows.LabelDeviceID}); err != nil {
		return nil, fmt.Errorf("check: list fleetd's Workflows: %w", err)
	}
	e := &evidence{src: src, devices: devices, workflows: map[string][]tinkerbell.Workflow{}, histories: map[int64]*history{}}
	for _, wf := range list.Items {
		e.workflows[wf.Labels[workflows.LabelRequest]] = append(e.workflows[wf.Labels[workflows.LabelRequest]], wf)
	}
	return e, nil
}

// checkNow checks the device as NetBox has it at rest: no request running or waiting, and the
// certificates as the last request left them.
func (e *evidence) checkNow(d stack.OwnerDevice, h *history) []Violation {
	var out []Violation
	bad := func(part, format string, args ...any) {
		out = append(out, Violation{Part: part, Device: d.Name, What: fmt.Sprintf(format, args...)})
	}
	state, req := d.Field("fleet_state"), d.Field("fleet_request")
	if !terminal[state] {
		out = append(out, Violation{Part: PartTerminal, Device: d.Name, Unended: true,
			What: fmt.Sprintf("request %s is still %s at rest (%s)", req, state, d.Field("fleet_message"))})
	}
	if a := d.Field("desired_action"); a != "" {
		bad(PartConsistent, "desired_action %s is still set at rest: the owner's request was never taken", a)
	}
	ldevid, lak := d.Field("ldevid_serial"), d.Field("lak_serial")
	switch {
	case (state == "wiped" || state == "retired" || state == "unconfirmed") && (ldevid != "" || lak != ""):
		bad(PartConsistent, "fleet_state %s with ldevid_serial %q and lak_serial %q: a wiped, retired or unconfirmed device has no certificates", state, ldevid, lak)
	case state == "active" && requestAction(req) == "provision" && (ldevid == "" || lak == ""):
		bad(PartConsistent, "active after provision %s with ldevid_serial %q and lak_serial %q: both are issued by a provision", req, ldevid, lak)
	}
	if d.StatusValue() == "decommissioning" && h.decomPending {
		bad(PartTerminal, "status decommissioning since %s but no retirement was ever taken", h.decomSince.Format(time.RFC3339Nano))
	}
	return out
}

// checkWorkflows checks promise (b) for the device: each request it ever claimed has exactly one
// Workflow, the one the claim named, labelled with the device and the request.
func (e *evidence) checkWorkflows(d stack.OwnerDevice, h *history) []Violation {
	var out []Violation
	for _, c := range h.claims {
		wfs := e.workflows[c.request]
		switch {
		case len(wfs) != 1:
			out = append(out, Violation{Part: PartWorkflow, Device: d.Name, What: fmt.Sprintf("request %s has %d Workflows %v, want exactly one", c.request, len(wfs), names(wfs))})
		case wfs[0].Name != c.workflow || wfs[0].Labels[workflows.LabelDeviceID] != strconv.FormatInt(d.ID, 10):
			out = append(out, Violation{Part: PartWorkflow, Device: d.Name, What: fmt.Sprintf("request %s claimed Workflow %s, but its Workflow is %s of device %s",
				c.request, c.workflow, wfs[0].Name, wfs[0].Labels[workflows.LabelDeviceID])})
		}
	}
	return out
}

// checkOrphans finds Workflows no device ever claimed: a Workflow without a request is one
// NetBox cannot explain.
func (e *evidence) checkOrphans() []Violation {
	claimed := map[string]bool{}
	for _, d := range e.devices {
		for _, c := range e.history(d).claims {
			claimed[c.request] = true
		}
	}
	var out []Violation
	for req, wfs := range e.workflows {
		if !claimed[req] {
			out = append(out, Violation{Part: PartWorkflow, Device: "-", What: fmt.Sprintf("Workflows %v carry request %q, which no device's change log claims", names(wfs), req)})
		}
	}
	return out
}

func names(wfs []tinkerbell.Workflow) []string {
	out := make([]string, len(wfs))
	for i, wf := range wfs {
		out[i] = wf.Name
	}
	return out
}

// machineEK is the SHA-256 of the machine's real EK, read from its TPM's EK certificate.
func machineEK(m stack.Machine) (string, error) {
	tpm, err := swtpm.Read(filepath.Join(m.Dir, stack.MachineTPMDir))
	if err != nil {
		return "", err
	}
	return tpm.EKSHA256, nil
}

// approved reports whether hash is among the comma-separated ek_sha256 of a device.
func approved(ekField, hash string) bool {
	for _, h := range strings.Split(ekField, ",") {
		if strings.EqualFold(strings.TrimSpace(h), hash) {
			return true
		}
	}
	return false
}

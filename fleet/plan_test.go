package fleet_test

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestPlanIsTheRealDecision plans each action and each refusal row, checks that the plan wrote
// nothing (the device with its version, its journal, no Workflow), then lets the real request
// path take the same request and checks that it did what the plan said: the same outcome, state,
// status, fleet_message and journal entry, the request id and Workflow name matching the plan's
// pattern.
func TestPlanIsTheRealDecision(t *testing.T) {
	active := func(d fleet.Device) fleet.Device {
		d.Status, d.Owned.State = fleet.StatusActive, fleet.StateActive
		return d
	}
	rows := []struct {
		name    string
		edit    func(fleet.Device) fleet.Device
		action  fleet.Action // asked; the real path is given it as desired_action (retire: decommissioning)
		fail    error        // the Template check's refusal
		outcome fleet.PlanOutcome
		want    string // in the plan's message
	}{
		{"ok/provision", nil, fleet.ActionProvision, nil, fleet.PlanAccepted, "provision accepted as request provision-<8 chars>: Workflow node-a-provision-<8 chars> from Template talos-install."},
		{"ok/attest", active, fleet.ActionAttest, nil, fleet.PlanAccepted, "attest accepted"},
		{"ok/wipe", nil, fleet.ActionWipe, nil, fleet.PlanAccepted, "Workflow node-a-wipe-<8 chars> from Template fleet-wipe"},
		{"ok/retire", active, fleet.ActionRetire, nil, fleet.PlanAccepted, "retire accepted"},
		{"refuse/disk-serial", func(d fleet.Device) fleet.Device { d.Declared.DiskSerial = " "; return d }, fleet.ActionWipe, nil, fleet.PlanRejected, "wipe refused: disk_serial is empty"},
		{"refuse/unknown-class", func(d fleet.Device) fleet.Device { d.Declared.Class = "nope"; return d }, fleet.ActionProvision, nil, fleet.PlanRejected, `fleet_class "nope" is not in classes.json`},
		{"refuse/class-not-installable", func(d fleet.Device) fleet.Device { d.Declared.Class = "worker-g2"; return d }, fleet.ActionProvision, nil, fleet.PlanRejected, "class worker-g2 cannot be installed"},
		{"refuse/tpm-1.2", func(d fleet.Device) fleet.Device { d.Declared.TPM = fleet.TPM12; return d }, fleet.ActionProvision, nil, fleet.PlanRejected, "tpm is 1.2"},
		{"refuse/no-mac", func(d fleet.Device) fleet.Device { d.MACs = nil; return d }, fleet.ActionWipe, nil, fleet.PlanRejected, "no MAC address"},
		{"refuse/no-address", func(d fleet.Device) fleet.Device { d.Address = netip.Prefix{}; return d }, fleet.ActionWipe, nil, fleet.PlanRejected, "no primary IPv4"},
		{"refuse/ek-hash", func(d fleet.Device) fleet.Device { d.Declared.EKHashes = []string{"abc"}; return d }, fleet.ActionProvision, nil, fleet.PlanRejected, `ek_sha256 entry "abc"`},
		{"refuse/attest-not-active", nil, fleet.ActionAttest, nil, fleet.PlanRejected, "attest re-proves a running node, but the device status is planned"},
		{"refuse/every-problem", func(d fleet.Device) fleet.Device { d.MACs, d.Declared.DiskSerial = nil, ""; return d }, fleet.ActionWipe, nil, fleet.PlanRejected, "disk_serial is empty: declare the serial of the one disk that may be wiped and installed; the device has no MAC"},
		{"refuse/template", nil, fleet.ActionWipe, fmt.Errorf("Template fleet-wipe: action wipe-disk has timeout 0: %w", fleet.ErrTemplate), fleet.PlanTemplateFails, "wipe request wipe-<8 chars> failed before anything ran: Template fleet-wipe: action wipe-disk has timeout 0"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ctx := context.Background()
			d := fleettest.Declared(12, "node-a")
			if r.edit != nil {
				d = r.edit(d)
			}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			inst.Fail = r.fail
			s := newTestService(inv, inst)
			before := inv.Get(12)

			p, err := s.Review.Plan(ctx, "node-a", r.action)
			if err != nil {
				t.Fatal(err)
			}
			if p.Outcome != r.outcome || p.Action != r.action {
				t.Fatalf("plan: %s %s, want %s %s (%+v)", p.Action, p.Outcome, r.action, r.outcome, p)
			}
			planned := p.Write.Message
			if p.Workflow != nil && p.Workflow.Problem != "" {
				planned = p.Workflow.Problem
			}
			if !strings.Contains(planned, r.want) {
				t.Errorf("plan's message %q lacks %q", planned, r.want)
			}
			// Nothing written.
			if got := inv.Get(12); !reflect.DeepEqual(got, before) {
				t.Fatalf("the plan changed the device:\n%+v\nwas\n%+v", got, before)
			}
			if j := inv.JournalOf(12); len(j) != 0 {
				t.Fatalf("the plan journaled %q", j)
			}
			if inst.Creates() != 0 {
				t.Fatal("the plan created a Workflow")
			}

			// The real path, asked the same.
			asked := inv.Get(12)
			if r.action == fleet.ActionRetire {
				asked.Status = fleet.StatusDecommissioning
			} else {
				asked.Declared.DesiredAction = r.action
			}
			inv.Set(asked)
			if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			pattern := func(s string) string {
				if got.Owned.Request == "" {
					return s
				}
				_, suffix, _ := strings.Cut(got.Owned.Request, "-")
				return strings.ReplaceAll(s, suffix, fleet.PlanRequestSuffix)
			}
			j := inv.JournalOf(12)
			switch r.outcome {
			case fleet.PlanTemplateFails:
				if got.Owned.State != p.Then[0].State || pattern(got.Owned.Message) != p.Workflow.Problem {
					t.Errorf("real path: %s %q, plan: %s %q", got.Owned.State, pattern(got.Owned.Message), p.Then[0].State, p.Workflow.Problem)
				}
				if len(j) != 2 || pattern(j[0]) != string(p.Write.Journal)+": "+p.Write.Message {
					t.Errorf("journal %q, plan's claim %s: %s", j, p.Write.Journal, p.Write.Message)
				}
			default:
				w := p.Write
				if got.Owned.State != w.State || (w.Status != "" && got.Status != w.Status) || pattern(got.Owned.Message) != w.Message {
					t.Errorf("real path: %s/%s %q; plan: %s/%s %q", got.Owned.State, got.Status, pattern(got.Owned.Message), w.State, w.Status, w.Message)
				}
				if got.Declared.DesiredAction != fleet.ActionNone {
					t.Errorf("desired_action %q left", got.Declared.DesiredAction)
				}
				if len(j) != 1 || pattern(j[0]) != string(w.Journal)+": "+w.Message {
					t.Errorf("journal %q, plan %s: %s", j, w.Journal, w.Message)
				}
				if r.outcome == fleet.PlanAccepted && (pattern(got.Owned.Request) != w.Request || pattern(got.Owned.Workflow) != w.Workflow || inst.Creates() != 1) {
					t.Errorf("request %s Workflow %s (%d created), plan %s %s", got.Owned.Request, got.Owned.Workflow, inst.Creates(), w.Request, w.Workflow)
				}
			}
		})
	}
}

// TestPlanSteps checks what a plan says beyond the claim: the disk, the configuration, the
// certificates, the lifecycle, and the plans that take no request.
func TestPlanSteps(t *testing.T) {
	ctx := context.Background()
	d := fleettest.Declared(12, "node-a")
	running := fleettest.Declared(13, "node-b")
	running.Owned.State, running.Owned.Request, running.Owned.Workflow = fleet.StateInstalling, "provision-abcdefgh", "node-b-provision-abcdefgh"
	retired := fleettest.Declared(14, "node-c")
	retired.Status, retired.Owned.State, retired.Owned.Request = fleet.StatusDecommissioning, fleet.StateRetired, "retire-abcdefgh"
	node := fleettest.Declared(15, "node-d")
	node.Status, node.Owned.State = fleet.StatusActive, fleet.StateActive
	inv := fleettest.NewNetBox(d, running, retired, node)
	s := newTestService(inv, fleettest.NewInstaller())

	p, err := s.Review.Plan(ctx, "node-a", fleet.ActionProvision)
	if err != nil {
		t.Fatal(err)
	}
	if p.Disk == nil || p.Disk.Serial != "S4EWNX0R123456" || !p.Disk.Erased || p.Config == nil || p.Config.Route != "/v1/config/talos" || len(p.Certificates) != 2 {
		t.Errorf("provision plan: disk %+v config %+v certificates %+v", p.Disk, p.Config, p.Certificates)
	}
	var states []string
	for _, st := range p.Then {
		states = append(states, string(st.State))
	}
	if got := strings.Join(states, " "); got != "installing configuring active" {
		t.Errorf("provision's steps %q", got)
	}
	if p.OnRefusal == nil || p.OnRefusal.State != fleet.StateFailed || p.OnRefusal.Status != fleet.StatusFailed {
		t.Errorf("on refusal %+v", p.OnRefusal)
	}
	if p, _ = s.Review.Plan(ctx, "node-d", fleet.ActionAttest); p.Disk == nil || p.Disk.Erased {
		t.Errorf("an attest erases nothing: %+v", p.Disk)
	}
	if p.OnNoReceipt != nil {
		t.Errorf("a provision has no receipt, yet its plan ends %+v without one", *p.OnNoReceipt)
	}
	// A wipe is done on its receipt; its Workflow's success without one ends it unconfirmed.
	if p, _ = s.Review.Plan(ctx, "node-a", fleet.ActionWipe); len(p.Then) != 2 || p.Then[1].Event != fleet.EventReceiptVerified || p.Then[1].State != fleet.StateWiped ||
		p.Then[1].Status != fleet.StatusOffline || !p.Then[1].ClearCerts {
		t.Errorf("wipe's steps %+v", p.Then)
	}
	if n := p.OnNoReceipt; n == nil || n.Event != fleet.EventWorkflowSucceeded || n.State != fleet.StateUnconfirmed || n.Status != fleet.StatusFailed || !n.ClearCerts {
		t.Errorf("wipe without a receipt %+v, want workflow-succeeded → unconfirmed, status failed, certificates cleared", n)
	}
	if p, _ = s.Review.Plan(ctx, "node-a", fleet.ActionNone); p.Outcome != fleet.PlanNothing {
		t.Errorf("no request: %s", p.Outcome)
	}
	if p, _ = s.Review.Plan(ctx, "node-b", fleet.ActionWipe); p.Outcome != fleet.PlanWaits || !strings.Contains(p.Why, "wipe waits for provision request provision-abcdefgh") {
		t.Errorf("queued: %s %q", p.Outcome, p.Why)
	}
	if p, _ = s.Review.Plan(ctx, "node-b", fleet.ActionNone); p.Outcome != fleet.PlanRunning || p.Workflow.Name != "node-b-provision-abcdefgh" || len(p.Then) != 2 {
		t.Errorf("running: %s %+v %+v", p.Outcome, p.Workflow, p.Then)
	}
	if p, _ = s.Review.Plan(ctx, "node-c", fleet.ActionRetire); p.Outcome != fleet.PlanNothing || !strings.Contains(p.Why, "retired already") {
		t.Errorf("retired: %s %q", p.Outcome, p.Why)
	}
	for _, c := range []struct {
		name   string
		action fleet.Action
		code   string
	}{{"nobody", fleet.ActionWipe, "unknown_device"}, {"node-a", "format", "unknown_action"}} {
		_, err := s.Review.Plan(ctx, c.name, c.action)
		if r, ok := fleet.AsRefusal(err); !ok || r.Code != c.code {
			t.Errorf("plan %s %s: %v, want %s", c.name, c.action, err, c.code)
		}
	}
	if j := inv.JournalOf(12); len(j) != 0 || inv.Get(12).Version != "1" {
		t.Errorf("plans wrote: journal %q, version %s", j, inv.Get(12).Version)
	}
}

// TestPlanOfARunningRequest: the plan of a device whose request runs says so, and names the
// request queued behind it and how the owner cancels that one: a retirement by setting the status
// back, a desired_action by clearing it.
func TestPlanOfARunningRequest(t *testing.T) {
	for _, r := range []struct {
		name        string
		edit        func(*fleet.Device)
		want, never string // in the plan's Why
	}{
		{"ok/nothing queued", func(*fleet.Device) {}, "provision request provision-aaaaaaaa runs (fleet_state installing); nothing new starts until it ends", "waits for"},
		{"ok/a retirement queued", func(d *fleet.Device) { d.Status = fleet.StatusDecommissioning },
			"; retire waits for provision request provision-aaaaaaaa (fleet_state installing): it starts when that request ends; set the status back from decommissioning to cancel it before then.", "clear desired_action"},
		{"ok/a wipe queued", func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe },
			"; wipe waits for provision request provision-aaaaaaaa (fleet_state installing): it starts when that request ends; clear desired_action to cancel it before then.", "set the status back"},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned = fleet.StatusStaged, fleet.Owned{State: fleet.StateInstalling, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
			r.edit(&d)
			s := newTestService(fleettest.NewNetBox(d), fleettest.NewInstaller())
			p, err := s.Review.Plan(context.Background(), "node-a", fleet.ActionNone)
			if err != nil {
				t.Fatal(err)
			}
			if p.Outcome != fleet.PlanRunning || !strings.Contains(p.Why, r.want) || strings.Contains(p.Why, r.never) {
				t.Errorf("plan %s: %q; want running, saying %q and not %q", p.Outcome, p.Why, r.want, r.never)
			}
		})
	}
}

// TestPlanOfAPendingEnrollment: while a request waits for the agent's enrollment, its plan lists
// what the enrollment must prove: a provision's ends with its configuration's acceptance, an
// attestation's does not; a class that does not require Secure Boot says it only records it.
// Once the enrollment is done (installing), nothing of it is left to plan.
func TestPlanOfAPendingEnrollment(t *testing.T) {
	for _, r := range []struct {
		name    string
		state   fleet.State
		request string
		want    []string // the enrollment checks' names, in order, after the common ones
	}{
		{"ok/a provision's enrollment", fleet.StatePending, "provision-aaaaaaaa", []string{"disk_absent", "config_rejected"}},
		{"ok/an attestation's enrollment", fleet.StatePending, "attest-aaaaaaaa", []string{"disk_absent"}},
		{"ok/enrolled, installing: no enrollment left", fleet.StateInstalling, "provision-aaaaaaaa", nil},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned = fleet.StatusStaged, fleet.Owned{State: r.state, Request: r.request, Workflow: "node-a-" + r.request}
			s := newTestService(fleettest.NewNetBox(d), fleettest.NewInstaller())
			p, err := s.Review.Plan(context.Background(), "node-a", fleet.ActionNone)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			secureBoot := ""
			for _, c := range p.Enrollment {
				names = append(names, c.Name)
				if c.Name == "secure_boot" {
					secureBoot = c.Detail
				}
			}
			if r.want == nil {
				if len(names) != 0 {
					t.Errorf("enrollment checks %v, want none", names)
				}
				return
			}
			if len(names) < len(r.want) || !slices.Equal(names[len(names)-len(r.want):], r.want) {
				t.Errorf("enrollment checks %v, want them to end %v", names, r.want)
			}
			if want := "class talos-worker records Secure Boot and does not require it"; secureBoot != want {
				t.Errorf("secure_boot: %q, want %q", secureBoot, want)
			}
		})
	}
}

// TestPlanWrite: whether the plan was asked for or read from NetBox, each declaration check's
// result, and whether the write clears desired_action: a wipe's (asked of the plan, it is planned
// as set) is cleared by the claim and by the rejection alike; a retirement, asked by the status,
// has none to clear.
func TestPlanWrite(t *testing.T) {
	for _, r := range []struct {
		name           string
		desired, asked fleet.Action // desired_action in NetBox; the action asked of the plan
		noMAC          bool         // a declaration problem: the plan is a rejection
		outcome        fleet.PlanOutcome
		wantAsked      bool
		wantClear      bool
		wantMACCheck   string
	}{
		{"ok/a wipe asked: accepted, cleared", fleet.ActionNone, fleet.ActionWipe, false, fleet.PlanAccepted, true, true, fleet.CheckPass},
		{"ok/a wipe read from desired_action: accepted, cleared", fleet.ActionWipe, fleet.ActionNone, false, fleet.PlanAccepted, false, true, fleet.CheckPass},
		{"ok/a retirement asked: accepted, nothing to clear", fleet.ActionNone, fleet.ActionRetire, false, fleet.PlanAccepted, true, false, fleet.CheckPass},
		{"refuse/a wipe asked, no MAC: rejected, cleared", fleet.ActionNone, fleet.ActionWipe, true, fleet.PlanRejected, true, true, fleet.CheckFail},
		{"refuse/a retirement asked, no MAC: rejected, nothing to clear", fleet.ActionNone, fleet.ActionRetire, true, fleet.PlanRejected, true, false, fleet.CheckFail},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status, d.Owned.State, d.Declared.DesiredAction = fleet.StatusActive, fleet.StateActive, r.desired
			if r.noMAC {
				d.MACs = nil
			}
			s := newTestService(fleettest.NewNetBox(d), fleettest.NewInstaller())
			p, err := s.Review.Plan(context.Background(), "node-a", r.asked)
			if err != nil {
				t.Fatal(err)
			}
			mac := ""
			for _, c := range p.Checks {
				if c.Name == "mac" {
					mac = c.Result
				}
			}
			if p.Outcome != r.outcome || p.Asked != r.wantAsked || p.Write == nil || p.Write.ClearDesiredAction != r.wantClear || mac != r.wantMACCheck {
				t.Fatalf("plan %s, asked %v, write %+v, mac check %q; want %s, asked %v, clear %v, mac %s", p.Outcome, p.Asked, p.Write, mac,
					r.outcome, r.wantAsked, r.wantClear, r.wantMACCheck)
			}
		})
	}
}

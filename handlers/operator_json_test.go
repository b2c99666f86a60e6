package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// getJSON asks an operator route with the operator token and decodes its answer into v.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer op")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestPlanRouteCarriesThePlan: GET /v1/devices/{name}/plan answers the plan the service makes,
// every part of it that the plan has and none that it has not: its state ("none" for a device
// that never carried a request), the write, the Workflow, the disk, the configuration, the
// certificates, the steps after, where a refusal leaves the request, and each enrollment check's
// refusal sentence by its code.
func TestPlanRouteCarriesThePlan(t *testing.T) {
	fresh := fleettest.Declared(12, "node-a")
	active := fleettest.Declared(13, "node-b")
	active.Status, active.Owned = fleet.StatusActive, fleet.Owned{State: fleet.StateActive, LDevIDSerial: "aa", LAKSerial: "bb"}
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fresh, active}})
	seen := map[string]bool{}
	for _, r := range []struct{ device, action string }{
		{"node-a", "provision"}, {"node-a", "wipe"}, {"node-a", "retire"}, {"node-a", "attest"},
		{"node-b", "provision"}, {"node-b", "attest"}, {"node-b", "wipe"}, {"node-b", "retire"}, {"node-b", ""},
	} {
		want, err := f.Service.Review.Plan(context.Background(), r.device, fleet.Action(r.action))
		if err != nil {
			t.Fatal(err)
		}
		var got api.Plan
		if status := getJSON(t, f.URL+"/v1/devices/"+r.device+"/plan?action="+r.action, &got); status != http.StatusOK {
			t.Fatalf("%s %s: %d", r.device, r.action, status)
		}
		at := r.device + " " + r.action + ": "
		wantState := string(want.State)
		if wantState == "" {
			wantState = "none"
		}
		if got.State != wantState || got.Action != string(want.Action) || got.Outcome != string(want.Outcome) {
			t.Errorf("%sstate %q action %q outcome %q, want %q %q %q", at, got.State, got.Action, got.Outcome, wantState, want.Action, want.Outcome)
		}
		for _, part := range []struct {
			name      string
			got, want bool
		}{
			{"write", got.Write != nil, want.Write != nil},
			{"workflow", got.Workflow != nil, want.Workflow != nil},
			{"disk", got.Disk != nil, want.Disk != nil},
			{"config", got.Config != nil, want.Config != nil},
			{"on_refusal", got.OnRefusal != nil, want.OnRefusal != nil},
			{"on_no_receipt", got.OnNoReceipt != nil, want.OnNoReceipt != nil},
			{"certificates", len(got.Certificates) > 0, len(want.Certificates) > 0},
			{"then", len(got.Then) > 0, len(want.Then) > 0},
		} {
			if part.got != part.want {
				t.Errorf("%s%s in the answer: %v, in the plan: %v", at, part.name, part.got, part.want)
			}
			seen[part.name] = seen[part.name] || part.want
		}
		if w := want.Write; w != nil && got.Write != nil && (got.Write.State != string(w.State) || got.Write.Request != w.Request || got.Write.Message != w.Message) {
			t.Errorf("%swrite %+v, want %+v", at, *got.Write, *w)
		}
		if wf := want.Workflow; wf != nil && got.Workflow != nil && got.Workflow.Name != wf.Name {
			t.Errorf("%sworkflow %+v, want %+v", at, *got.Workflow, *wf)
		}
		if d := want.Disk; d != nil && got.Disk != nil && got.Disk.Serial != d.Serial {
			t.Errorf("%sdisk %+v, want %+v", at, *got.Disk, *d)
		}
		if c := want.Config; c != nil && got.Config != nil && got.Config.Route != c.Route {
			t.Errorf("%sconfig %+v, want %+v", at, *got.Config, *c)
		}
		if len(got.Enrollment) != len(want.Enrollment) {
			t.Fatalf("%s%d enrollment checks, want %d", at, len(got.Enrollment), len(want.Enrollment))
		}
		for i, c := range want.Enrollment {
			g := got.Enrollment[i]
			if wantRefusal := map[bool]string{true: fleet.PublicSentence(c.Code)}[c.Code != ""]; g.Code != c.Code || g.Refusal != wantRefusal {
				t.Errorf("%senrollment check %s: code %q refusal %q, want %q %q", at, c.Name, g.Code, g.Refusal, c.Code, wantRefusal)
			}
			seen["refusal"] = seen["refusal"] || c.Code != ""
		}
		if s := want.OnNoReceipt; s != nil && got.OnNoReceipt != nil && (got.OnNoReceipt.State != string(s.State) || got.OnNoReceipt.Status != string(s.Status)) {
			t.Errorf("%son_no_receipt %+v, want %+v", at, *got.OnNoReceipt, *s)
		}
	}
	for _, part := range []string{"write", "workflow", "disk", "config", "on_refusal", "on_no_receipt", "certificates", "then", "refusal"} {
		if !seen[part] {
			t.Errorf("no plan here has a %s: the rows do not test it", part)
		}
	}
}

// TestDeviceRouteJSON: a device's view says "none" for a device that never carried a request, a
// TPM left empty in NetBox as 2.0 and a declared 1.2 as it is, and the last accepted boot check
// and whether a baseline is held only when there are.
func TestDeviceRouteJSON(t *testing.T) {
	fresh := fleettest.Declared(12, "node-a")
	old := fleettest.Declared(13, "node-b")
	old.Declared.TPM = fleet.TPM12
	checked := fleettest.Declared(14, "node-c")
	checked.Status, checked.Owned = fleet.StatusActive, fleet.Owned{State: fleet.StateActive, BootBaseline: "fleetd-baseline/1",
		LastBootCheck: time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("CET", 3600))}
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fresh, old, checked}})
	for _, r := range []struct {
		name, device, state, tpm, last string
		baseline                       bool
	}{
		{"ok/never a request: none, TPM 2.0, no check", "node-a", "none", "2.0", "", false},
		{"ok/a declared TPM 1.2 stays 1.2", "node-b", "none", "1.2", "", false},
		{"ok/an active node: its state, its last check in UTC, its baseline", "node-c", "active", "2.0", "2026-11-30T09:00:00Z", true},
	} {
		var got struct {
			State    string `json:"state"`
			Declared struct {
				TPM string `json:"tpm"`
			} `json:"declared"`
			BootCheck struct {
				Last        *string `json:"last"`
				HasBaseline bool    `json:"has_baseline"`
			} `json:"boot_check"`
		}
		if status := getJSON(t, f.URL+"/v1/devices/"+r.device, &got); status != http.StatusOK {
			t.Fatalf("%s: %d", r.name, status)
		}
		last := ""
		if got.BootCheck.Last != nil {
			last = *got.BootCheck.Last
		}
		if got.State != r.state || got.Declared.TPM != r.tpm || last != r.last || (r.last == "") != (got.BootCheck.Last == nil) || got.BootCheck.HasBaseline != r.baseline {
			t.Errorf("%s: %+v, want state %q tpm %q last %q baseline %v", r.name, got, r.state, r.tpm, r.last, r.baseline)
		}
	}
}

// TestReconcileRouteDecisionLine: an operator's reconcile writes one decision line with trigger
// operator: at info when it decided, at warn with the error when it was refused.
func TestReconcileRouteDecisionLine(t *testing.T) {
	var logs syncBuffer
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fleettest.Declared(12, "node-a")}, HandlerLog: zerolog.New(&logs)})
	for _, r := range []struct {
		name, device, level string
		status              int
	}{
		{"ok/a device reconciled: info", "node-a", "info", http.StatusOK},
		{"refuse/an unknown device: warn, with the refusal", "nope", "warn", http.StatusNotFound},
	} {
		logs.Reset()
		req, _ := http.NewRequest("POST", f.URL+"/v1/devices/"+r.device+"/reconcile", nil)
		req.Header.Set("Authorization", "Bearer op")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var line map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "decision" {
				line = m
			}
		}
		if resp.StatusCode != r.status || line["message"] != "decision" || line["trigger"] != "operator" || line["level"] != r.level ||
			(r.level == "warn") != (line["error"] != nil) {
			t.Errorf("%s: %d, decision line %v; want %d at %s", r.name, resp.StatusCode, line, r.status, r.level)
		}
	}
}

// syncBuffer is a bytes.Buffer the server's goroutines write and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

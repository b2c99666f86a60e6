package stack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/api"
)

// planSnapshot is everything a plan must leave as it was: per device, its saves in NetBox's
// change log, its custom fields, its journal, its Workflows and its Hardware's version; and
// Kea's reservations.
type planSnapshot struct {
	Changes   map[string]int
	Fields    map[string]map[string]any
	Journal   map[string]int
	Workflows map[string]int
	Hardware  map[string]string
	Kea       []byte
}

func snapshotForPlan(t *testing.T, names []string) planSnapshot {
	t.Helper()
	emu := testStack.NetBox()
	s := planSnapshot{Changes: map[string]int{}, Fields: map[string]map[string]any{}, Journal: map[string]int{},
		Workflows: map[string]int{}, Hardware: map[string]string{}}
	for _, n := range names {
		id := testStack.DeviceID(n)
		s.Changes[n] = len(emu.Changes("dcim.device", id))
		f, err := emu.CustomFieldData(id)
		if err != nil {
			t.Fatal(err)
		}
		s.Fields[n], s.Journal[n], s.Workflows[n] = f, len(emu.Journal(id)), len(deviceWorkflows(t, n))
		var hw tinkv1.Hardware
		if err := testStack.Kube().Get(tctx(t), client.ObjectKey{Namespace: testStack.Info().Namespace, Name: n}, &hw); err == nil {
			s.Hardware[n] = hw.ResourceVersion
		}
	}
	kea, err := os.ReadFile(filepath.Join(testStack.Info().Dir, "kea", "reservations.json"))
	if err != nil {
		t.Fatal(err)
	}
	s.Kea = kea
	return s
}

// fleetdPlan runs the real `fleetd plan` with the stack's fleetd.yaml, as an operator on spore
// would, and returns its exit status and plan.
func fleetdPlan(t *testing.T, device, action string) (int, api.Plan) {
	t.Helper()
	info := testStack.Info()
	args := []string{"plan", "--config", info.Fleetd.Config, "-o", "json"}
	if action != "" {
		args = append(args, "--action", action)
	}
	code, out, errOut := runFleetd(t, append(args, device)...)
	var p api.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("fleetd plan %s %s: exit %d, %v: %s %s", device, action, code, err, out, errOut)
	}
	return code, p
}

// TestPlanWritesNothing plans every action, and the request NetBox holds, on a valid device and
// on every faulty one, with the real `fleetd plan`, and finds NetBox's change log, the custom
// fields and the journals, the Workflows and Hardware, and Kea's reservations as they were. Then
// the owner asks the wipe a plan said would be rejected, and NetBox holds the plan's message.
func TestPlanWritesNothing(t *testing.T) {
	needStack(t)
	faulty := []string{"plan-no-disk", "fault-no-disk-serial", "fault-unknown-class", "fault-no-ek", "fault-tpm12", "fault-no-mac", "g2-1"}
	names := append([]string{"plan-ok"}, faulty...)
	before := snapshotForPlan(t, names)
	want := map[string]string{"": "nothing-to-do", "provision": "accepted", "attest": "rejected", "wipe": "accepted", "retire": "accepted"}
	for _, n := range names {
		for _, action := range []string{"", "provision", "attest", "wipe", "retire"} {
			code, p := fleetdPlan(t, n, action)
			w := want[action]
			if n != "plan-ok" && action != "" {
				w = "rejected"
				if p.Outcome == "still-rejected" {
					w = p.Outcome
				}
			}
			wantCode := 0
			if strings.Contains(w, "rejected") {
				wantCode = 1
			}
			if p.Outcome != w || code != wantCode {
				t.Errorf("plan %s %q: %s (exit %d), want %s (exit %d): %s", n, action, p.Outcome, code, w, wantCode, p.Why)
			}
		}
	}
	if after := snapshotForPlan(t, names); !reflect.DeepEqual(after, before) {
		t.Fatalf("the plans wrote:\n%+v\nwas\n%+v", after, before)
	}

	// The real request: the same rejection, word for word.
	_, p := fleetdPlan(t, "plan-no-disk", "wipe")
	if p.Write == nil || p.Write.State != "rejected" {
		t.Fatalf("plan of a wipe without disk_serial: %+v", p)
	}
	ask(t, "plan-no-disk", "wipe")
	d := waitState(t, "plan-no-disk", "rejected")
	if got := d.Field("fleet_message"); got != p.Write.Message {
		t.Errorf("fleet_message %q, the plan said %q", got, p.Write.Message)
	}
	j := waitJournal(t, "plan-no-disk", before.Journal["plan-no-disk"]+1)
	if last := j[len(j)-1]; last.Comments != p.Write.Message || last.KindValue() != p.Write.Journal {
		t.Errorf("journal %s %q, the plan said %s %q", last.KindValue(), last.Comments, p.Write.Journal, p.Write.Message)
	}
	// Asked again, the wipe is rejected again (the claim clears desired_action once more); a
	// retirement, which sets no desired_action, finds this very rejection held and writes nothing.
	if _, again := fleetdPlan(t, "plan-no-disk", "wipe"); again.Outcome != "rejected" || again.Write == nil || again.Write.Message != p.Write.Message {
		t.Errorf("the same plan after the rejection: %s, %s", again.Outcome, fmt.Sprint(again.Write))
	}
}

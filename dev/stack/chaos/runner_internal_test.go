package chaos

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/folly-infra/fleetd/dev/stack"
)

// TestResolveFaults: a NetBox fault happened when it faulted something by its heal, and did not
// when it met no request or delivery; a fault is resolved once.
func TestResolveFaults(t *testing.T) {
	hits := 0
	res := []StepResult{{Step: Step{Kind: NetBoxFault, Arg: "5xx"}, Events: (&Runner{}).pendingFault("netbox-fault 5xx", func() int { return hits })}}
	resolveFaults(res, io.Discard, 1)
	if e := res[0].Events[0]; e.Outcome != Idle || e.Err == nil || e.Hits != 0 {
		t.Errorf("refuse/faulted nothing: event = %+v, want idle with why", e)
	}
	hits = 3
	resolveFaults(res, io.Discard, 1)
	if e := res[0].Events[0]; e.Outcome != Idle {
		t.Errorf("a resolved fault was resolved again: %+v", e)
	}
	res = []StepResult{{Step: Step{Kind: NetBoxFault, Arg: "5xx"}, Events: (&Runner{}).pendingFault("netbox-fault 5xx", func() int { return hits })}}
	resolveFaults(res, io.Discard, 1)
	if e := res[0].Events[0]; e.Outcome != Happened || e.Err != nil || e.Hits != 3 {
		t.Errorf("ok/faulted three: event = %+v, want happened with 3 hits", e)
	}
}

// TestMachineEvents: what the machines' steps count — a netboot whose worker ran the Workflow
// happened even when an action failed (a refused enrollment); one with no Workflow found
// nothing; a boot with nothing installed and a check of a node not up are idle; drift is a check
// that happened.
func TestMachineEvents(t *testing.T) {
	action := fmt.Errorf("netboot m1: %w", &stack.ActionError{Action: "fleetd-enroll", State: "FAILED", Message: "refused"})
	rows := []struct {
		name string
		got  Event
		want Outcome
	}{
		{"ok/netboot ran", netbootEvent(nil), Happened},
		{"ok/netboot ran, its enrollment refused", netbootEvent(action), Happened},
		{"idle/netboot with no Workflow", netbootEvent(fmt.Errorf("netboot m1: %w", stack.ErrNoWorkflow)), Idle},
		{"failed/netboot broke before its actions", netbootEvent(errors.New("power on: swtpm")), Failed},
		{"idle/boot with nothing installed", bootEvent(fmt.Errorf("boot m1: %w", stack.ErrNotInstalled)), Idle},
		{"failed/boot's fetch refused", bootEvent(errors.New("boot m1: the seed fetch failed")), Failed},
		{"idle/boot check of a node not up", bootCheckEvent(fmt.Errorf("x: %w", stack.ErrNotBooted)), Idle},
		{"ok/boot check with drift", bootCheckEvent(fmt.Errorf("x: %w: pcr 7", stack.ErrDrift)), Happened},
		{"failed/boot check refused", bootCheckEvent(errors.New("exit 3")), Failed},
	}
	for _, r := range rows {
		if r.got.Outcome != r.want {
			t.Errorf("%s: %s %s (%v), want %s", r.name, r.got.Key, r.got.Outcome, r.got.Err, r.want)
		}
	}
}

// TestStaleSave: a stale write sends every key of the copy with the value read, and changes the
// one key its variant names; the copy kept is not changed.
func TestStaleSave(t *testing.T) {
	copyOf := func(desired, tpm any) map[string]any {
		return map[string]any{"desired_action": desired, "tpm": tpm, "fleet_state": "configuring", "fleet_request": "provision-aaaaaaaa",
			"fleet_identity": map[string]any{"request": "provision-aaaaaaaa"}, "disk_serial": "SER-A"}
	}
	for _, r := range []struct {
		name, arg      string
		copy, wantDiff map[string]any
	}{
		{"ok/desired_action asked", "desired-action", copyOf(nil, nil), map[string]any{"desired_action": "attest"}},
		{"ok/the copy's attest taken back", "desired-action", copyOf("attest", nil), map[string]any{"desired_action": nil}},
		{"ok/tpm stated", "owner-field", copyOf("provision", nil), map[string]any{"tpm": "2.0"}},
		{"ok/tpm back to empty", "owner-field", copyOf(nil, "2.0"), map[string]any{"tpm": nil}},
	} {
		kept := fmt.Sprint(r.copy)
		got, err := staleSave(r.copy, r.arg)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		want := copyOf(r.copy["desired_action"], r.copy["tpm"])
		for k, v := range r.wantDiff {
			want[k] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: saves %v, want %v", r.name, got, want)
		}
		if fmt.Sprint(r.copy) != kept {
			t.Errorf("%s: the copy kept became %v", r.name, r.copy)
		}
	}
	if _, err := staleSave(copyOf(nil, nil), "comments"); err == nil {
		t.Error("refuse/an unknown variant: no error")
	}
}

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

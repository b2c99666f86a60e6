package stack_test

import (
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// TestSealedDevices: the copies AddSealedDevices makes of an installed device are, to the real
// fleetd, running nodes whose fields it wrote: its plan judges each (with its change log) active
// with nothing to do or repair, and its reconcile passes write nothing to them and journal
// nothing; a declared device AddDeclaredDevices makes may be provisioned. A template that is not
// installed, or no device, is refused and nothing is added. (The steady state of `make load`
// stands on them: docs/performance.md.)
func TestSealedDevices(t *testing.T) {
	needStack(t)
	emu := testStack.NetBox()
	for _, tc := range []struct{ name, template, want string }{
		{"refuse/not-installed", "plan-ok", "install it first"},
		{"refuse/no-such-device", "nobody", `no device "nobody"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := testStack.AddSealedDevices(tc.template, 1, "refused-copy", time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) || len(got) != 0 {
				t.Fatalf("AddSealedDevices(%s) = %v, %v; want an error saying %q and nothing added", tc.template, got, err, tc.want)
			}
			if _, err := testStack.Owner().Device(tctx(t), "refused-copy-00001"); err == nil {
				t.Errorf("refused-copy-00001 is in NetBox")
			}
		})
	}
	provisioned(t, "sealed-template")
	if err := step(t, stack.BootCheck, "sealed-template", stack.StepOptions{}); err != nil {
		t.Fatalf("sealed-template's boot check: %v", err)
	}
	copies, err := testStack.AddSealedDevices("sealed-template", 2, "sealcopy", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	declared, err := testStack.AddDeclaredDevices(1, "declared")
	if err != nil {
		t.Fatal(err)
	}
	runs := reconcileRuns(t)
	for _, c := range copies {
		if code, p := fleetdPlan(t, c.Name, ""); code != 0 || p.State != "active" || p.Outcome != "nothing-to-do" || p.Repair != "" {
			t.Errorf("plan %s: exit %d, %s %s (%s; repair %q); want active with nothing to do: fleetd vouches for its copied fields",
				c.Name, code, p.State, p.Outcome, p.Why, p.Repair)
		}
	}
	if code, p := fleetdPlan(t, declared[0].Name, "provision"); code != 0 || p.Outcome != "accepted" {
		t.Errorf("plan %s --action provision: exit %d, %s (%s); want accepted", declared[0].Name, code, p.Outcome, p.Why)
	}
	waitReconciles(t, runs, 2)
	for _, c := range copies {
		if n, j := len(emu.Changes("dcim.device", c.ID)), len(emu.Journal(c.ID)); n != 0 || j != 0 {
			t.Errorf("%s after two reconcile passes: %d saves, %d journal entries; want none (nothing asked fleetd for anything)", c.Name, n, j)
		}
	}
}

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
)

// twoInstanceDevices are TestTwoInstances' own machines (no schedule draws them): one whose
// configuration a Talos node fetches, one whose seed an image-based node fetches.
var twoInstanceDevices = []stack.SeedDevice{
	{Name: "two-talos", Class: "talos-worker"},
	{Name: "two-alpine", Class: "alpine-edge"},
}

// TestTwoInstances: the lifecycle through two fleetd instances behind the stack's front
// (docs/operate.md "Several instances"). Each device is provisioned through the front, netboots
// (its agent's rounds go to whichever instance the front picks), and boots after a restart
// between netboot and boot: for two-talos the instance that attested it is stopped and the
// other restarted, so the fetch is served by a process that never saw the attestation; for
// two-alpine every instance is restarted. Each ends active with exactly one request, one
// Workflow and one delivery among both instances' logs, and passes its first boot check.
func TestTwoInstances(t *testing.T) {
	s := needStack(t)
	if s.FleetdInstances() < 2 {
		t.Fatalf("the chaos stack runs %d fleetd instance; TestTwoInstances needs two: run it without -fleetd-instances 1 (the default is 2)", s.FleetdInstances())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Run("stop the attesting instance, restart the other", func(t *testing.T) {
		name := "two-talos"
		installedThroughFront(ctx, t, s, name)
		attested := instancesLogging(t, s, name, "evidence", "attested")
		if len(attested) != 1 {
			t.Fatalf("instances that logged %s's attestation: %v, want exactly one", name, attested)
		}
		a := attested[0]
		b := 3 - a // the other of two
		if err := s.StopFleetdInstance(a); err != nil {
			t.Fatal(err)
		}
		restarted, err := s.RestartFleetdInstance(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("instance %d (attested %s) stopped; instance %d restarted: pid %d → %d", a, name, b, restarted.OldPID, restarted.NewPID)
		if err := stack.Boot(ctx, s.Info(), name, stack.StepOptions{Out: logWriter{t}}); err != nil {
			t.Fatalf("boot with instance %d stopped and %d restarted: %v", a, b, err)
		}
		if got := instancesLogging(t, s, name, "deliver", "delivered"); !slices.Equal(got, []int{b}) {
			t.Errorf("instances that delivered %s's configuration: %v, want [%d] (the only one up)", name, got, b)
		}
		if err := s.StartFleetdInstance(a); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitFleetdReady(ctx); err != nil {
			t.Fatal(err)
		}
		activeOnce(ctx, t, s, name)
	})
	t.Run("restart every instance", func(t *testing.T) {
		name := "two-alpine"
		installedThroughFront(ctx, t, s, name)
		done, err := s.RestartFleetd(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(done) != s.FleetdInstances() {
			t.Errorf("RestartFleetd restarted %+v, want each of %d instances", done, s.FleetdInstances())
		}
		if err := stack.Boot(ctx, s.Info(), name, stack.StepOptions{Out: logWriter{t}}); err != nil {
			t.Fatalf("boot after every instance restarted: %v", err)
		}
		if got := instancesLogging(t, s, name, "deliver", "delivered"); len(got) != 1 {
			t.Errorf("instances that delivered %s's configuration: %v, want exactly one", name, got)
		}
		activeOnce(ctx, t, s, name)
	})
}

// installedThroughFront asks for a provision as the owner, waits for its Workflow and netboots
// the machine: its install succeeded and its configuration waits (configuring).
func installedThroughFront(ctx context.Context, t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	if _, err := s.Owner().Patch(ctx, s.DeviceID(name), map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}}); err != nil {
		t.Fatalf("ask for a provision of %s: %v", name, err)
	}
	waitUntil(ctx, t, name+"'s Workflow", func() (bool, string) {
		d, err := s.Owner().Device(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		if d.Field("fleet_state") != "pending" {
			return false, "fleet_state " + d.Field("fleet_state")
		}
		if _, err := stack.CurrentWorkflow(ctx, s.Kube(), s.Info().Namespace, d); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err := stack.Netboot(ctx, s.Info(), name, stack.StepOptions{Out: logWriter{t}}); err != nil {
		t.Fatalf("netboot %s: %v", name, err)
	}
	waitUntil(ctx, t, name+" configuring", func() (bool, string) {
		d, err := s.Owner().Device(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		return d.Field("fleet_state") == "configuring", "fleet_state " + d.Field("fleet_state")
	})
}

// activeOnce checks that the device is active after one request made by one instance, with one
// Workflow and one acceptance in its journal, and that its first boot check passes through the
// front.
func activeOnce(ctx context.Context, t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	var d stack.OwnerDevice
	waitUntil(ctx, t, name+" active", func() (bool, string) {
		var err error
		if d, err = s.Owner().Device(ctx, name); err != nil {
			return false, err.Error()
		}
		return d.Field("fleet_state") == "active", "fleet_state " + d.Field("fleet_state") + ": " + d.Field("fleet_message")
	})
	if got := instancesLogging(t, s, name, "claim", "accepted"); len(got) != 1 {
		t.Errorf("instances that claimed %s's provision: %v, want exactly one", name, got)
	}
	wfs, err := stack.DeviceWorkflows(ctx, s.Kube(), s.Info().Namespace, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(wfs) != 1 || wfs[0].Name != d.Field("fleet_workflow") {
		var names []string
		for _, w := range wfs {
			names = append(names, w.Name)
		}
		t.Errorf("%s's Workflows: %v, want only %s", name, names, d.Field("fleet_workflow"))
	}
	j, err := s.Owner().Journal(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, e := range j {
		if strings.Contains(e.Comments, "accepted as request") {
			accepted++
		}
	}
	if accepted != 1 {
		t.Errorf("%s's journal has %d acceptances, want 1", name, accepted)
	}
	if err := stack.BootCheck(ctx, s.Info(), name, stack.StepOptions{Out: logWriter{t}}); err != nil {
		t.Errorf("%s's first boot check through the front: %v", name, err)
	}
}

// instancesLogging lists the instances (1-based) whose log has a decision line for the device
// with that step and outcome.
func instancesLogging(t *testing.T, s *stack.Stack, device, step, outcome string) []int {
	t.Helper()
	var out []int
	for k, in := range s.Info().Fleetd.Instances {
		f, err := os.Open(in.Log)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			var l struct{ Message, Device, Step, Outcome string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "decision" && l.Device == device && l.Step == step && l.Outcome == outcome {
				out = append(out, k+1)
				break
			}
		}
		f.Close()
	}
	return out
}

// waitUntil polls cond every 200 ms until it holds, failing the test with its last word when ctx
// ends or a minute passes.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(time.Minute)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if ctx.Err() != nil || time.Now().After(end) {
			t.Fatalf("waiting for %s: %s", what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

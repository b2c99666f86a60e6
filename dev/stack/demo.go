package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// demoWait bounds how long the demo waits for fleetd to record one step in NetBox.
const demoWait = 90 * time.Second

// Demo walks the example inventory through its lifecycle on a running stack (docs/design.md §8, `make
// demo`): one machine of each class kind through provision, netboot (the real enrollment),
// first boot and a boot check; one through a wipe and one through retirement; and every faulty
// declaration to its refusal. It prints each step and what NetBox says after it, and returns an
// error at the first step that did not do what it should.
func Demo(ctx context.Context, info Info, out io.Writer) error {
	d := &demo{info: info, out: out, owner: NewOwner(info.NetBox.URL, info.NetBox.Token)}
	for _, name := range []string{"cp-1", "worker-1", "builder-1", "edge-1", "lab-1"} {
		if err := d.install(ctx, name); err != nil {
			return err
		}
	}
	if err := d.erase(ctx, "worker-1", map[string]any{"custom_fields": map[string]any{"desired_action": "wipe"}}, "wiped"); err != nil {
		return err
	}
	if err := d.erase(ctx, "builder-1", map[string]any{"status": "decommissioning"}, "retired"); err != nil {
		return err
	}
	for _, dev := range info.Devices {
		if dev.Faulty != "" {
			if err := d.refusal(ctx, dev.Name); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(out, "demo: every step did what it should")
	return nil
}

type demo struct {
	info  Info
	out   io.Writer
	owner *Owner
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, "demo: "+format+"\n", args...) }

// install is provision → netboot → boot → boot check.
func (d *demo) install(ctx context.Context, name string) error {
	d.say("%s: the owner sets desired_action=provision", name)
	if err := d.ask(ctx, name, map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}}, "pending"); err != nil {
		return err
	}
	if err := d.machineStep(ctx, Netboot, name, "configuring", "active"); err != nil {
		return err
	}
	if err := d.machineStep(ctx, Boot, name, "active"); err != nil {
		return err
	}
	if err := BootCheck(ctx, d.info, name, StepOptions{Out: d.out}); err != nil {
		return err
	}
	dev, err := d.owner.Device(ctx, name)
	if err != nil {
		return err
	}
	if dev.Field("boot_check") != "ok" {
		return fmt.Errorf("demo %s: boot_check is %q after an accepted boot check, want ok", name, dev.Field("boot_check"))
	}
	d.say("%s: boot_check ok at %s", name, dev.Field("last_boot_check"))
	return nil
}

// erase is a wipe or a retirement of an installed machine: the request, then netboot.
func (d *demo) erase(ctx context.Context, name string, request map[string]any, final string) error {
	b, _ := json.Marshal(request)
	d.say("%s: the owner PATCHes %s", name, b)
	if err := d.ask(ctx, name, request, "pending"); err != nil {
		return err
	}
	return d.machineStep(ctx, Netboot, name, final)
}

// refusal asks a faulty device for a provision and expects it rejected before anything runs.
func (d *demo) refusal(ctx context.Context, name string) error {
	d.say("%s: the owner sets desired_action=provision on a faulty declaration", name)
	return d.ask(ctx, name, map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}}, "rejected")
}

// ask PATCHes the device as the owner and waits until fleetd recorded one of the states.
func (d *demo) ask(ctx context.Context, name string, body map[string]any, states ...string) error {
	dev, err := d.owner.Device(ctx, name)
	if err != nil {
		return err
	}
	if _, err := d.owner.Patch(ctx, dev.ID, body); err != nil {
		return err
	}
	return d.waitState(ctx, name, states...)
}

// machineStep runs a machine step and waits until fleetd recorded one of the states.
func (d *demo) machineStep(ctx context.Context, f func(context.Context, Info, string, StepOptions) error, name string, states ...string) error {
	if err := f(ctx, d.info, name, StepOptions{Out: d.out}); err != nil {
		return err
	}
	return d.waitState(ctx, name, states...)
}

// waitState polls NetBox until the device's fleet_state is one of states, then prints what
// fleetd recorded.
func (d *demo) waitState(ctx context.Context, name string, states ...string) error {
	end := time.Now().Add(demoWait)
	for {
		dev, err := d.owner.Device(ctx, name)
		if err == nil && slices.Contains(states, dev.Field("fleet_state")) {
			d.say("%s: NetBox status %s, fleet_state %s: %s", name, dev.StatusValue(), dev.Field("fleet_state"), dev.Field("fleet_message"))
			return nil
		}
		if time.Now().After(end) {
			last := "unreadable"
			if err == nil {
				last = fmt.Sprintf("fleet_state %q: %s", dev.Field("fleet_state"), dev.Field("fleet_message"))
			}
			return fmt.Errorf("demo %s: fleet_state is not %s after %s (%s)", name, strings.Join(states, " or "), demoWait, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

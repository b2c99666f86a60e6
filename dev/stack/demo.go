package stack

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/pki"
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
	if err := d.renew(ctx, "lab-1"); err != nil {
		return err
	}
	if err := d.plan(ctx, "worker-1", "wipe"); err != nil {
		return err
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
	if err := d.inventory(ctx, "edge-1"); err != nil {
		return err
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
	if err := d.ldevid(name); err != nil {
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

// demoRenewWithin is the longest certificate lifetime the demo waits out the renewal point of
// (half of it); `make demo` runs the stack with --cert-lifetime 4m.
const demoRenewWithin = 10 * time.Minute

// renew waits for the renewal point of name's LAK (half the stack's certificate lifetime after
// its issue) and runs its boot check, which must renew it: a new lak_serial in NetBox and in the
// node's lak.pem, and a new ldevid_serial when the node holds its LDevID (docs/enrollment.md,
// "Renewal").
func (d *demo) renew(ctx context.Context, name string) error {
	lifetime := d.info.Fleetd.CertLifetime
	if lifetime <= 0 || lifetime > demoRenewWithin {
		d.say("%s: renewal not shown: certificates live %s here (fleetsim demo --cert-lifetime 4m shows one)", name, lifetime)
		return nil
	}
	before, err := d.owner.Device(ctx, name)
	if err != nil {
		return err
	}
	lak, err := readCertFile(filepath.Join(d.info.Machines[name].Dir, MachineDiskDir, fleet.NodeDir, fleet.NodeFileLAKCert))
	if err != nil {
		return fmt.Errorf("demo %s: %w", name, err)
	}
	due := lak.NotBefore.Add(5*time.Minute + lifetime/2 + 2*time.Second) // pki's clock skew, then half the lifetime
	d.say("%s: waiting %s for its certificates' renewal point (half of %s)", name, time.Until(due).Round(time.Second), lifetime)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(due)):
	}
	if err := BootCheck(ctx, d.info, name, StepOptions{Out: d.out}); err != nil {
		return err
	}
	after, err := d.owner.Device(ctx, name)
	if err != nil {
		return err
	}
	if after.Field("lak_serial") == before.Field("lak_serial") || after.Field("lak_serial_previous") != before.Field("lak_serial") {
		return fmt.Errorf("demo %s: the boot check past the renewal point did not renew the LAK: lak_serial %s (was %s), lak_serial_previous %q",
			name, after.Field("lak_serial"), before.Field("lak_serial"), after.Field("lak_serial_previous"))
	}
	d.say("%s: renewed for the same TPM keys: lak_serial %s → %s, ldevid_serial %s → %s (the old ones stay accepted until the node presents the new)",
		name, before.Field("lak_serial"), after.Field("lak_serial"), before.Field("ldevid_serial"), after.Field("ldevid_serial"))
	return nil
}

// readCertFile parses the first certificate of a PEM file.
func readCertFile(path string) (*x509.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCertificatesPEM(raw)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("read %s: no certificate (%v)", path, err)
	}
	return certs[0], nil
}

// ldevid prints the LDevID files the node's first boot left for SPIRE, and fails unless all
// three are there.
func (d *demo) ldevid(name string) error {
	files, err := LDevIDFiles(d.info, name)
	if err != nil {
		return err
	}
	var parts []string
	for _, f := range []string{"ldevid.pem", "ldevid.pub", "ldevid.priv"} {
		b, ok := files[f]
		if !ok {
			return fmt.Errorf("demo %s: its first boot left no %s in /var/lib/fleetd-node for SPIRE's tpm_devid agent", name, f)
		}
		parts = append(parts, fmt.Sprintf("%s (%d bytes)", f, len(b)))
	}
	d.say("%s: the LDevID for SPIRE's tpm_devid agent is in /var/lib/fleetd-node: %s", name, strings.Join(parts, ", "))
	return nil
}

// plan runs the real `fleetd plan` for action before the owner asks for it, as "Before you wipe"
// in docs/runbooks.md does, and expects the request accepted with the disk it erases named.
func (d *demo) plan(ctx context.Context, name, action string) error {
	d.say("%s: fleetd plan --action %s, before the owner asks (it writes nothing)", name, action)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, d.info.Fleetd.Binary, "plan", "--config", d.info.Fleetd.Config, "--action", action, name)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(d.out, &out), d.out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fleetd plan --action %s %s: %w", action, name, err)
	}
	if !strings.Contains(out.String(), "): accepted\n") || !strings.Contains(out.String(), "disk: ERASES disk_serial ") {
		return fmt.Errorf("fleetd plan --action %s %s: the plan does not accept the request and name the disk it erases", action, name)
	}
	return nil
}

// inventory shows `fleetd inventory check` on an installed machine: it agrees with NetBox, then
// its install disk is replaced (its content copied, so the node boots as before), its next boot
// check reports the disks it has, and the check finds NetBox's disk_serial no longer there.
func (d *demo) inventory(ctx context.Context, name string) error {
	// A boot check first: it brings the facts up to date, and renews certificates the demo's short
	// lifetime has brought close to expiry, which the check would report too.
	if err := BootCheck(ctx, d.info, name, StepOptions{Out: d.out}); err != nil {
		return err
	}
	d.say("%s: fleetd inventory check, NetBox's declaration against what the machine proved and reported", name)
	if out, code, err := d.inventoryCheck(ctx, name); err != nil || code != 0 {
		return fmt.Errorf("fleetd inventory check %s before the swap: exit %d, want 0 (NetBox and the machine agree): %v\n%s", name, code, err, out)
	}
	ch, err := SwapDisk(d.info, name, "sda", "", true)
	if err != nil {
		return err
	}
	d.say("%s: %s; NetBox still declares the old one", name, ch.What)
	if err := BootCheck(ctx, d.info, name, StepOptions{Out: d.out}); err != nil {
		return err
	}
	out, code, err := d.inventoryCheck(ctx, name)
	if code != 1 || !strings.Contains(out, name+": disk_not_found: ") {
		return fmt.Errorf("fleetd inventory check %s after the swap: exit %d, want 1 with a disk_not_found line: %v\n%s", name, code, err, out)
	}
	return nil
}

// inventoryCheck runs `fleetd inventory check` for one device and returns its output and exit code.
func (d *demo) inventoryCheck(ctx context.Context, name string) (string, int, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, d.info.Fleetd.Binary, "inventory", "check", "--config", d.info.Fleetd.Config, name)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(d.out, &out), d.out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode(), nil
	}
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), 0, nil
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

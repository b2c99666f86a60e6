package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/stack"
)

// restart restarts fleetd the way a reboot of spore would: SIGTERM, then the supervisor of
// `fleetsim up` starts a new one; it waits until the new one is ready. Every instance, or with
// --instance K only the K-th.
func restart(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("restart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetsim restart fleetd [--instance K]")
		fs.PrintDefaults()
	}
	instance := fs.Int("instance", 0, "restart only instance K (1-based; `fleetsim up --fleetd-instances N` runs N); default every instance")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 || pos[0] != "fleetd" || *instance < 0 {
		fs.Usage()
		return 2
	}
	info, err := stack.ReadInfo(dir)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim restart:", err)
		return 1
	}
	var done []stack.FleetdRestart
	if *instance > 0 {
		r, err := stack.RestartFleetdInstance(ctx, info, *instance)
		if err != nil {
			fmt.Fprintln(stderr, "fleetsim restart:", err)
			return 1
		}
		done = []stack.FleetdRestart{r}
	} else if done, err = stack.RestartFleetd(ctx, info); err != nil {
		fmt.Fprintln(stderr, "fleetsim restart:", err)
		return 1
	}
	for _, r := range done {
		name := "fleetd"
		if len(info.Fleetd.Instances) > 1 {
			name = fmt.Sprintf("fleetd instance %d", r.Instance)
		}
		fmt.Fprintf(stdout, "%s restarted: pid %d stopped, pid %d ready at %s (nothing is lost: configurations are rendered when the node fetches them)\n",
			name, r.OldPID, r.NewPID, info.Fleetd.URL)
	}
	return 0
}

// workflow runs device NAME's current Workflow through the stack's Tinkerbell server and a real
// worker (tink-agent, or tink-worker) whose containers succeed or fail as asked
// (stack.DriveWorkflow).
func workflow(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("workflow", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetsim workflow NAME succeed|fail [--action A] [--message M]")
		fs.PrintDefaults()
	}
	action := fs.String("action", "", "fail: the action that fails (default: the first unfinished); succeed: the last action to succeed (default: all)")
	message := fs.String("message", "", "fail: the failing action's output (its container's, in the machine's worker.log)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 2 || (pos[1] != "succeed" && pos[1] != "fail") {
		fs.Usage()
		return 2
	}
	name, fail := pos[0], pos[1] == "fail"
	if !fail && *message != "" {
		fmt.Fprintln(stderr, "fleetsim workflow: --message is the failing action's output and goes with fail only; a succeeding action's container prints its own")
		return 2
	}
	if fail && *message == "" {
		*message = "simulated failure (fleetsim workflow " + name + " fail)"
	}
	info, err := stack.ReadInfo(dir)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim workflow:", err)
		return 1
	}
	if err := driveDeviceWorkflow(ctx, info, name, stack.Drive{Fail: fail, Action: *action, Message: *message}, stdout); err != nil {
		fmt.Fprintln(stderr, "fleetsim workflow:", err)
		return 1
	}
	return 0
}

func driveDeviceWorkflow(ctx context.Context, info stack.Info, name string, d stack.Drive, stdout io.Writer) error {
	dev, err := stack.NewOwner(info.NetBox.URL, info.NetBox.Token).Device(ctx, name)
	if err != nil {
		return err
	}
	kc, err := stack.KubeClient(info.Kubeconfig)
	if err != nil {
		return err
	}
	wf, err := stack.CurrentWorkflow(ctx, kc, info.Namespace, dev)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: Workflow %s (Template %s)\n", name, wf.Name, wf.Spec.TemplateRef)
	d.Report = func(action string, state tinkv1.WorkflowState, output string) {
		line := fmt.Sprintf("  action %-20s %s", action, strings.TrimPrefix(string(state), "STATE_"))
		if output != "" {
			line += ": " + output
		}
		fmt.Fprintln(stdout, line)
	}
	if err := stack.DriveWorkflow(ctx, info, kc, wf, d); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: Workflow %s is %s\n", name, wf.Name, wf.Status.State)
	return nil
}

// parseInterspersed parses flags that may stand between the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// machine drives a simulated machine (docs/design.md §8): netboot (HookOS runs its Workflow, the agent
// enrolls for real), boot (the installed OS fetches its configuration), boot-check.
func machine(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("machine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: fleetsim machine NAME netboot|boot|boot-check [--event-log rhel8|rhel8-other-kernel|cos85|ubuntu-no-secure-boot|ubuntu-no-dbx|FILE]
       fleetsim machine NAME netboot --forge ACTION[,ACTION…]
       fleetsim machine NAME boot --kubelet ready|not-ready|none
       fleetsim machine NAME join [--kubelet ready|not-ready]
       fleetsim machine NAME swap-disk [--disk sda] [--serial S] [--clone]
       fleetsim machine NAME add-disk [--serial S]
       fleetsim machine NAME set-mac [--mac M]
       fleetsim machine NAME set-uuid [--uuid U]
       fleetsim machine NAME replace-tpm

swap-disk, add-disk, set-mac, set-uuid (a new mainboard) and replace-tpm change the machine's
hardware; NetBox keeps its declaration. With the workload cluster (fleetsim up
--workload-cluster), a Talos machine's boot runs its kubelet's join (--kubelet), and join runs
it later for a machine booted with --kubelet none.`)
		fs.PrintDefaults()
	}
	logName := fs.String("event-log", "", "the boot the firmware measures at this power-on (default: the machine's recorded boot, rhel8); another one models a changed boot")
	disk := fs.String("disk", "sda", "swap-disk: the disk replaced (sda is the install disk)")
	serial := fs.String("serial", "", "swap-disk, add-disk: the new disk's serial (default: a random SWAP…)")
	clone := fs.Bool("clone", false, "swap-disk: the old disk's content is copied onto the new one, so the node boots as before")
	mac := fs.String("mac", "", "set-mac: the new network card's MAC (default: a random 02:f6:…)")
	uuid := fs.String("uuid", "", "set-uuid: the new mainboard's SMBIOS UUID (default: a random one)")
	kubelet := fs.String("kubelet", "ready", "boot, join: with the workload cluster, what a Talos machine's kubelet does: ready (join, post its Node Ready), not-ready (join, never Ready) or none (no kubelet; boot only)")
	forge := fs.String("forge", "", "netboot: actions (comma-separated) the machine does not run, reported succeeded: a forged completion (wipe-disk,wipe-receipt: nothing erased, no receipt)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	steps := map[string]func(context.Context, stack.Info, string, stack.StepOptions) error{
		"netboot": stack.Netboot, "boot": stack.Boot, "boot-check": stack.BootCheck, "join": stack.Join}
	changes := map[string]func(stack.Info, string) (stack.HardwareChange, error){
		"swap-disk": func(i stack.Info, n string) (stack.HardwareChange, error) {
			return stack.SwapDisk(i, n, *disk, *serial, *clone)
		},
		"add-disk": func(i stack.Info, n string) (stack.HardwareChange, error) { return stack.AddDisk(i, n, *serial) },
		"set-mac":  func(i stack.Info, n string) (stack.HardwareChange, error) { return stack.SetMAC(i, n, *mac) },
		"set-uuid": func(i stack.Info, n string) (stack.HardwareChange, error) { return stack.SetSMBIOSUUID(i, n, *uuid) },
		"replace-tpm": func(i stack.Info, n string) (stack.HardwareChange, error) {
			return stack.ReplaceTPM(ctx, i, n)
		},
	}
	if len(pos) != 2 || steps[pos[1]] == nil && changes[pos[1]] == nil {
		fs.Usage()
		return 2
	}
	if change := changes[pos[1]]; change != nil {
		return hardware(dir, pos[0], change, stdout, stderr)
	}
	o := stack.StepOptions{Out: stdout}
	if *forge != "" {
		if pos[1] != "netboot" {
			fmt.Fprintln(stderr, "fleetsim machine: --forge names actions of a netboot's Workflow and goes with netboot only")
			return 2
		}
		o.Forge = strings.Split(*forge, ",")
	}
	if o.Kubelet, err = stack.ParseKubeletMode(*kubelet); err != nil {
		fmt.Fprintln(stderr, "fleetsim machine:", err)
		return 2
	}
	if *logName != "" {
		if o.EventLog, err = eventLog(*logName); err != nil {
			fmt.Fprintln(stderr, "fleetsim machine:", err)
			return 2
		}
	}
	info, err := stack.ReadInfo(dir)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim machine:", err)
		return 1
	}
	if err := steps[pos[1]](ctx, info, pos[0], o); err != nil {
		fmt.Fprintln(stderr, "fleetsim machine:", err)
		return 1
	}
	return 0
}

// hardware changes the machine's hardware and says what NetBox still declares.
func hardware(dir, name string, change func(stack.Info, string) (stack.HardwareChange, error), stdout, stderr io.Writer) int {
	info, err := stack.ReadInfo(dir)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim machine:", err)
		return 1
	}
	c, err := change(info, name)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim machine:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", name, c.What)
	fmt.Fprintln(stdout, "  NetBox keeps its declaration (and Kea and the Tinkerbell Hardware the declared MAC): fleetd inventory check compares the two")
	return 0
}

// eventLog is a recorded event log by name, or the content of a file.
func eventLog(name string) ([]byte, error) {
	switch name {
	case "rhel8":
		return eventlogs.RHEL8SecureBoot, nil
	case "rhel8-other-kernel": // a netboot the stack's boot policy refuses (boot_policy)
		return eventlogs.RHEL8OtherKernel(), nil
	case "cos85":
		return eventlogs.COS85SecureBoot, nil
	case "ubuntu-no-secure-boot":
		return eventlogs.Ubuntu2104NoSecureBoot, nil
	case "ubuntu-no-dbx":
		return eventlogs.Ubuntu2104NoDBX, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--event-log %s is no recorded log's name and no readable file: %w", name, err)
	}
	return b, nil
}

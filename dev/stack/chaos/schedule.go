package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Kind is what a step does.
type Kind string

// The owner's steps, through NetBox's REST API as the admin user.
const (
	Ask          Kind = "ask"          // desired_action = Arg (provision, attest, wipe)
	Decommission Kind = "decommission" // status decommissioning: retire the device
	Redeclare    Kind = "redeclare"    // status planned: a retired device may be provisioned again
	// StaleWrite is an owner's client that saves a copy of the device read N steps earlier, as
	// pynetbox's Record.save() sends it: the whole custom_fields object, every key with the value
	// read, one key changed (Arg: desired-action, or owner-field, the owner's tpm).
	StaleWrite Kind = "stale-write"
	// ForgedWrite is a NetBox user who may edit devices (and holds no secret of fleetd's)
	// saving the device twice back to back: first the values of fleetd's fields — fleet_seal
	// with them — from one of fleetd's own earlier saves of it, then the values it holds now.
	ForgedWrite Kind = "forged-write"
)

// The machines' steps (dev/stack) and Tinkerbell's.
const (
	Netboot   Kind = "netboot"    // HookOS runs the machine's Workflow: the real agent, then the simulated actions
	Boot      Kind = "boot"       // the installed OS fetches its configuration
	BootCheck Kind = "boot-check" // the node's hourly check
	Renew     Kind = "renew"      // the node's check once its certificates are due: Arg "" or answer-lost
	Workflow  Kind = "workflow"   // Tinkerbell ends the machine's Workflow without running it: Arg succeed or fail
)

// The faults.
const (
	NetBoxFault Kind = "netbox-fault" // Arg: 5xx, slow, timeout, drop-webhooks, late-webhooks; N events
	NetBoxHeal  Kind = "netbox-heal"  // every NetBox fault cleared
	KubeStop    Kind = "kube-stop"    // the Kubernetes API server stops
	KubeStart   Kind = "kube-start"   // and starts again on the same data
	KillFleetd  Kind = "kill-fleetd"  // SIGKILL; the supervisor starts a new fleetd a second later
)

// Kill points that ride on another step (Step.Kill).
const (
	KillAfterClaim   = "after-claim"   // Ask: SIGKILL once fleetd's claim of the request is in NetBox
	KillDuringEnroll = "during-enroll" // Netboot: SIGKILL Delay after the agent starts enrolling
	KillMidRenewal   = "mid-renewal"   // Renew: SIGKILL once fleetd recorded the renewal, before it answers
)

// Step is one step of a schedule.
type Step struct {
	Kind    Kind
	Machine string        // the device the step acts on ("" for faults)
	Arg     string        // see Kind
	N       int           // NetBoxFault: how many requests or deliveries it hits; StaleWrite: how many steps earlier its copy was read
	Status  int           // NetBoxFault 5xx: the status answered
	Method  string        // NetBoxFault: only requests with this method ("" any)
	Delay   time.Duration // NetBoxFault slow/timeout/late-webhooks: the delay; KillDuringEnroll: when
	Kill    string        // a kill point riding on this step (KillAfterClaim, KillDuringEnroll)
}

// String is the step as the schedule prints it, one line that says everything it does.
func (s Step) String() string {
	var b strings.Builder
	b.WriteString(string(s.Kind))
	if s.Machine != "" {
		b.WriteString(" " + s.Machine)
	}
	if s.Arg != "" {
		b.WriteString(" " + s.Arg)
	}
	if s.Status != 0 {
		fmt.Fprintf(&b, " status=%d", s.Status)
	}
	if s.Method != "" {
		b.WriteString(" method=" + s.Method)
	}
	if s.N != 0 {
		fmt.Fprintf(&b, " n=%d", s.N)
	}
	if s.Delay != 0 {
		fmt.Fprintf(&b, " delay=%s", s.Delay)
	}
	if s.Kill != "" {
		b.WriteString(" +kill-fleetd-" + s.Kill)
	}
	return b.String()
}

// Schedule is the steps drawn from one seed.
type Schedule struct {
	Seed  int64
	Steps []Step
}

// String prints the schedule, one numbered step a line.
func (sc Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule seed=%d (%d steps)\n", sc.Seed, len(sc.Steps))
	for i, s := range sc.Steps {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, s)
	}
	return b.String()
}

// Machines lists the machines the schedule acts on, in order of first appearance.
func (sc Schedule) Machines() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range sc.Steps {
		if s.Machine != "" && !seen[s.Machine] {
			seen[s.Machine] = true
			out = append(out, s.Machine)
		}
	}
	return out
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/fleet"
)

// RenewAnswerLost is Renew's variant whose check is cut after fleetd recorded the renewal: the
// node goes down (its fleetd boot-check is killed) before fleetd's answer reaches it.
const RenewAnswerLost = "answer-lost"

// The chaos stack's certificates live CertLifetime (main_test.go: two minutes) and are renewed
// from half of it, so a node the schedule checks again within a minute is renewed during the
// run. A Renew step waits for the node's certificates to reach their renewal point, then checks:
// it is the node that checks at least once per half-life, for which the promise "an active node
// never loses the ability to pass its check" holds (check_renewal.go).

// renewalCut is how long a renewal's journal entry (the POST fleetd makes after its conditional
// write, before it answers) is held in NetBox, the moment a cut lands in: below the chaos
// stack's netbox.timeout, so that an uncut check completes.
const renewalCut = 1500 * time.Millisecond

// clockSkew is how far before its issue a certificate's NotBefore lies (pki: five minutes).
const clockSkew = 5 * time.Minute

// renew plays the node's check once its certificates are due. Uncut, it happened when the check
// passed and the node's files hold new certificates. Cut (answer-lost, or fleetd killed
// mid-renewal), the cut happened when it landed after fleetd recorded the renewal in NetBox
// and before the node installed it; the node then checks again, and the step happened when that
// check passed and renewed it (docs/enrollment.md "Renewal": the handover).
func (r *Runner) renew(ctx context.Context, s Step) []Event {
	k := key(Renew, s.Arg)
	out := func(own Event, kill *Event) []Event {
		if s.Kill == "" {
			return []Event{own}
		}
		if kill == nil {
			e := idle(killKey(s.Kill), errors.New("the renewal was not cut, so fleetd was not killed mid-renewal"))
			kill = &e
		}
		return []Event{own, *kill}
	}
	info := r.Stack.Info()
	dir := filepath.Join(info.Machines[s.Machine].Dir, stack.MachineDiskDir, fleet.NodeDir)
	lak, err := NodeCert(filepath.Join(dir, fleet.NodeFileLAKCert))
	ldevid, err2 := NodeCert(filepath.Join(dir, fleet.NodeFileLDevIDCert))
	if err != nil || err2 != nil {
		return out(idle(k, fmt.Errorf("%s has no installed node with certificates to renew (%v)", s.Machine, errors.Join(err, err2))), nil)
	}
	d, err := r.world().device(s.Machine)
	if err != nil || d.status != "active" || d.state != "active" || d.desired != "" {
		return out(idle(k, fmt.Errorf("%s is not an active node (status %s, fleet_state %s, desired_action %q): nothing is renewed for it", s.Machine, d.status, d.state, d.desired)), nil)
	}
	due := lak.NotBefore.Add(clockSkew + info.Fleetd.CertLifetime/2)
	if t := ldevid.NotBefore.Add(clockSkew + info.Fleetd.CertLifetime/2); t.After(due) {
		due = t
	}
	if time.Now().After(lak.NotAfter) || time.Now().After(ldevid.NotAfter) {
		return out(idle(k, fmt.Errorf("%s's certificates lapsed: it did not check within their lifetime", s.Machine)), nil)
	}
	sleep(ctx, time.Until(due.Add(time.Second)))
	held := r.nodeSerials(dir)
	check := func(ctx context.Context) error {
		return stack.BootCheck(ctx, info, s.Machine, stack.StepOptions{Out: r.Out})
	}
	renewed := func() error {
		if now := r.nodeSerials(dir); now == held {
			return fmt.Errorf("the check passed but did not renew the node's certificates (still %s)", now)
		}
		return nil
	}
	if s.Arg == "" && s.Kill == "" {
		if err := check(ctx); err != nil {
			return out(did(k, err), nil)
		}
		return out(did(k, renewed()), nil)
	}

	// The cut: hold the renewal's journal entry, and cut while it is held.
	id := r.Stack.DeviceID(s.Machine)
	fired := r.Stack.NetBox().Faults().AddAPI(netboxemu.APIFaultRule{Method: http.MethodPost, PathPrefix: "/api/extras/journal-entries/",
		Times: 1, Fault: netboxemu.APIFault{Delay: renewalCut}})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- check(cctx) }()
	waitFor(ctx, time.Minute, func() bool { return fired() > 0 || len(done) > 0 })
	written := fired() > 0 && (r.field(id, "ldevid_serial") != held.ldevid || r.field(id, "lak_serial") != held.lak)
	var kill *Event
	if written {
		if s.Kill != "" {
			e := did(killKey(s.Kill), r.killFleetd(ctx))
			kill = &e
		} else {
			cancel() // the node goes down: fleetd's answer reaches no one
		}
	}
	cutErr := <-done
	if !written {
		return out(idle(k, fmt.Errorf("the cut did not land after fleetd's renewal write (the check: %v)", cutErr)), kill)
	}
	// The node checks again once fleetd serves (a killed instance was started again), whether
	// or not it is ready: a kube-stop of the schedule may hold the Kubernetes API down, which
	// a check does not use.
	if err := r.Stack.WaitFleetdServing(ctx); err != nil {
		return out(did(k, err), kill)
	}
	if err := check(ctx); err != nil {
		return out(did(k, fmt.Errorf("the node's check after the cut: %w", err)), kill)
	}
	return out(did(k, renewed()), kill)
}

// heldSerials are the serials of the node's certificate files.
type heldSerials struct{ ldevid, lak string }

func (h heldSerials) String() string { return "LDevID " + h.ldevid + ", LAK " + h.lak }

func (r *Runner) nodeSerials(dir string) heldSerials {
	ld, _ := NodeSerial(filepath.Join(dir, fleet.NodeFileLDevIDCert))
	lak, _ := NodeSerial(filepath.Join(dir, fleet.NodeFileLAKCert))
	return heldSerials{ldevid: ld, lak: lak}
}

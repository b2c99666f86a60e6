package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Joining ends when the node is in the cluster (docs/design.md §1, "Joining the cluster"): its
// Node Ready, posted by a kubelet holding the client certificate fleetd approved for this request
// — only system:node:NAME may write Node NAME's status (the Node authorizer and NodeRestriction),
// and fleetd let exactly one certificate of that name come from this install. A Node Ready
// before that approval, or whose Ready heartbeat is older than it (an earlier install's object),
// proves nothing about this one.

// NodeReport is a Node as the workload cluster has it, for the join decision.
type NodeReport struct {
	Name string
	// Ready is the Ready condition True; ReadyAt its last heartbeat (zero when none).
	Ready   bool
	ReadyAt time.Time
	// Conditions is the Node's conditions in one line, for the journal ("Ready=False
	// (KubeletNotReady: container runtime network not ready), MemoryPressure=False").
	Conditions string
}

// NodeChanged moves a joining device to active when its Node is Ready after fleetd approved its
// client certificate for the device's request. Anything else changes nothing: a Node of no
// device, of a device not joining or renamed since its attestation (AttestedAs: the Node of its
// new name is another machine's), or not yet Ready.
func (s *Membership) NodeChanged(ctx context.Context, n NodeReport) (Outcome, error) {
	out := Outcome{Device: n.Name, Step: string(EventNodeReady), Result: "no-change"}
	if !n.Ready || !s.core.netbox.mayJoin(n.Name) {
		return out, nil // a running node's heartbeat or the watch's resync: nothing to read
	}
	d, err := s.core.netbox.DeviceByName(ctx, n.Name)
	if errors.Is(err, ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read device %s: %w", n.Name, netboxErr(err))
	}
	if d.Owned.State != StateJoining {
		return out, nil
	}
	if _, renamed := AttestedAs(d); renamed {
		// The Node of this name is not the device's: its machine's kubelet carries the name it
		// was attested under, and this Node may be another machine's. The join deadline fails
		// the request, saying so (missingStep).
		return out, nil
	}
	approved := d.Owned.Identity.KubeletClient
	// Kubernetes keeps condition times to the second: a heartbeat in the second of the approval
	// counts as after it.
	if approved == nil || d.Owned.Identity.Request != d.Owned.Request || n.ReadyAt.Before(approved.Approved.Truncate(time.Second)) {
		return out, nil // Ready, but not through this install's certificate: wait for it
	}
	msg := fmt.Sprintf("%s joined the cluster: Node %s is Ready, its kubelet holding the client certificate of CSR %s that fleetd approved for request %s.",
		d.Name, n.Name, approved.Name, d.Owned.Request)
	out, err = s.core.apply(ctx, d, ActionProvision, EventNodeReady, msg)
	if err == nil && out.Result == string(StateActive) {
		s.core.metrics.joins.WithLabelValues("ready").Inc()
	}
	return out, err
}

// JoinDeadlines fails the request of every joining device of the listing whose node is not
// Ready within the join deadline of its delivery, journaling what is missing: no CSR arrived, no
// Node registered, or the Node's conditions. node is the cluster's Node of a name, as the watch
// last saw it.
func (s *Membership) JoinDeadlines(ctx context.Context, devices []Device, node func(name string) (NodeReport, bool)) []Outcome {
	now := s.core.clock.Now()
	var outs []Outcome
	for _, d := range devices {
		id := d.Owned.Identity
		if d.Owned.State != StateJoining || id.Delivered.IsZero() || now.Before(id.Delivered.Add(s.joinDeadline)) {
			continue
		}
		n, seen := node(d.Name)
		msg := fmt.Sprintf("provision request %s failed: %s did not join the cluster within %s of its delivery at %s: %s. Check the node's console (talosctl dmesg) and its kubelet's log; provision it again once it is fixed.",
			d.Owned.Request, d.Name, s.joinDeadline, id.Delivered.Format(time.RFC3339), missingStep(d, n, seen))
		out, err := s.core.apply(ctx, d, ActionProvision, EventJoinTimedOut, msg)
		if err != nil {
			s.core.log.Warn().Err(err).Str("device", d.Name).Msg("failing a join past its deadline failed; the next listing retries")
			continue
		}
		if out.Result == string(StateFailed) {
			s.core.metrics.joins.WithLabelValues("timed_out").Inc()
		}
		outs = append(outs, out)
	}
	return outs
}

// JoinWait is the step a joining device waits for, by its sealed fields (`fleetd plan`,
// `fleetd show`): delivered and no CSR approved yet, or its CSR approved and its Node not yet
// Ready. "" for a device that is not joining.
func JoinWait(d Device) string {
	if d.Owned.State != StateJoining {
		return ""
	}
	id := d.Owned.Identity
	if id.KubeletClient == nil {
		return fmt.Sprintf("delivered at %s; waits for its kubelet's client CSR (none approved yet)", id.Delivered.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("client CSR %s approved at %s; waits for Node %s to register and be Ready", id.KubeletClient.Name, id.KubeletClient.Approved.UTC().Format(time.RFC3339), d.Name)
}

// missingStep says which step of joining has not happened: delivered → CSR approved → Node
// registered → Ready.
func missingStep(d Device, n NodeReport, seen bool) string {
	if attested, renamed := AttestedAs(d); renamed {
		return fmt.Sprintf("the device was attested as %s and renamed since: its node carries the name %s, and no Node of either name counts for it", attested, attested)
	}
	switch {
	case d.Owned.Identity.KubeletClient == nil:
		return "no CSR arrived: fleetd approved no client certificate for it (is the kubelet running, and does it reach the API server?)"
	case !seen:
		return fmt.Sprintf("no Node registered: its client certificate was approved (CSR %s) but no Node %s exists", d.Owned.Identity.KubeletClient.Name, d.Name)
	case !n.Ready:
		return fmt.Sprintf("Node %s is not Ready: %s", d.Name, n.Conditions)
	}
	return fmt.Sprintf("Node %s is Ready but its heartbeat is not after the approval of its certificate", d.Name)
}

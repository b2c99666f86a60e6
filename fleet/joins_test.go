package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// joinedFixture is the approver's fleet with node-a delivered at testEpoch and, when approved,
// its client CSR approved five minutes later.
func joinedFixture(t *testing.T, approved bool) approverFixture {
	t.Helper()
	f := newApproverFixture(t)
	d := f.nb.Get(12)
	d.Owned.Identity.Delivered = testEpoch
	if approved {
		d.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-a", UID: "uid-a", Approved: testEpoch.Add(5 * time.Minute)}
	}
	f.nb.Set(d)
	return f
}

// TestNodeChanged: a joining device becomes active on its Node Ready after fleetd approved its
// certificate for the request; a Node Ready otherwise changes nothing.
func TestNodeChanged(t *testing.T) {
	afterApproval := testEpoch.Add(6 * time.Minute)
	rows := []struct {
		name     string
		approved bool
		node     fleet.NodeReport
		want     fleet.State
	}{
		{"ok/Ready after the approval: active", true, fleet.NodeReport{Name: "node-a", Ready: true, ReadyAt: afterApproval}, fleet.StateActive},
		{"refuse/Ready with no certificate approved for the request", false, fleet.NodeReport{Name: "node-a", Ready: true, ReadyAt: afterApproval}, fleet.StateJoining},
		{"refuse/Ready heartbeat older than the approval (an earlier install's Node)", true, fleet.NodeReport{Name: "node-a", Ready: true, ReadyAt: testEpoch}, fleet.StateJoining},
		{"refuse/not Ready", true, fleet.NodeReport{Name: "node-a", ReadyAt: afterApproval, Conditions: "Ready=False"}, fleet.StateJoining},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f := joinedFixture(t, r.approved)
			if _, err := f.s.Membership.NodeChanged(context.Background(), r.node); err != nil {
				t.Fatal(err)
			}
			d := f.nb.Get(12)
			if d.Owned.State != r.want {
				t.Fatalf("node-a is %s, want %s", d.Owned.State, r.want)
			}
			j := f.nb.JournalOf(12)
			if r.want == fleet.StateActive {
				if d.Status != fleet.StatusActive || len(j) != 1 || !strings.Contains(j[0], "success: node-a joined the cluster") || !strings.Contains(j[0], "CSR csr-a") {
					t.Errorf("status %s, journal %q", d.Status, j)
				}
				if n := labelled(t, f.reg, "fleetd_requests_total", "action", "provision", "result", "succeeded"); n != 1 {
					t.Errorf("fleetd_requests_total{provision,succeeded} = %v, want 1", n)
				}
			} else if len(j) != 0 {
				t.Errorf("journal %q, want none", j)
			}
		})
	}
	t.Run("refuse/a Ready Node of another machine's name given to a joining device", func(t *testing.T) {
		// node-a's device, its certificate approved, is renamed to node-w: Node node-w is Ready
		// through another machine's kubelet, never through node-a's, which carries node-a.
		f := joinedFixture(t, true)
		renamed(f.nb, 12, "node-w")
		if out, err := f.s.Membership.NodeChanged(context.Background(), fleet.NodeReport{Name: "node-w", Ready: true, ReadyAt: afterApproval}); err != nil || out.Result != "no-change" {
			t.Errorf("NodeChanged = %+v, %v; want no change", out, err)
		}
		if d, j := f.nb.Get(12), f.nb.JournalOf(12); d.Owned.State != fleet.StateJoining || len(j) != 0 {
			t.Errorf("the renamed device is %s, journal %q; want joining, nothing journaled", d.Owned.State, j)
		}
	})
	t.Run("ignore/a Node of no device, and of an active device", func(t *testing.T) {
		f := joinedFixture(t, true)
		for _, name := range []string{"node-z", "node-o"} {
			if out, err := f.s.Membership.NodeChanged(context.Background(), fleet.NodeReport{Name: name, Ready: true, ReadyAt: afterApproval}); err != nil || out.Result != "no-change" {
				t.Errorf("%s: %+v, %v", name, out, err)
			}
		}
	})
}

// TestNodeChangedReadsOnlyAJoiningDevice: once a listing filled the view, a Ready Node whose
// device is in another state than joining costs NetBox nothing (a running node's heartbeats and
// the watch's resyncs: at 10,000 nodes they would read NetBox tens of times a second); a joining
// device's Node, a Node of no device, and any Node before the first listing are read. What makes
// a device joining or not is this instance's own write at once, another's at the next listing
// (a judged read, the Node watch's own included, sees it too).
func TestNodeChangedReadsOnlyAJoiningDevice(t *testing.T) {
	ctx := context.Background()
	f := joinedFixture(t, true)
	ready := func(name string) fleet.NodeReport {
		return fleet.NodeReport{Name: name, Ready: true, ReadyAt: testEpoch.Add(6 * time.Minute)}
	}
	reads := func(t *testing.T, name string) int64 {
		t.Helper()
		before := f.nb.Calls.Load()
		if _, err := f.s.Membership.NodeChanged(ctx, ready(name)); err != nil {
			t.Fatal(err)
		}
		return f.nb.Calls.Load() - before
	}
	if n := reads(t, "node-o"); n == 0 {
		t.Errorf("before any listing, an active device's Ready Node read nothing: the view cannot know it is not joining")
	}
	if _, err := f.s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		node string
		read bool
	}{{"node-o", false}, {"NODE-O", false}, {"node-z", true}, {"node-b", true}} {
		if n := reads(t, r.node); (n > 0) != r.read {
			t.Errorf("after a listing, %s's Ready Node made %d NetBox calls; want a read: %v", r.node, n, r.read)
		}
	}
	if n := reads(t, "node-a"); n == 0 || f.nb.Get(12).Owned.State != fleet.StateActive {
		t.Fatalf("node-a, joining with its certificate approved: %d calls, %s; want it read and active", n, f.nb.Get(12).Owned.State)
	}
	if n := reads(t, "node-a"); n != 0 {
		t.Errorf("node-a, made active by this instance's write: its next Ready made %d NetBox calls, want none", n)
	}
	// Another instance makes node-b active: this one reads its Ready Node until its next listing.
	b := f.nb.Get(13)
	b.Owned.State = fleet.StateActive
	f.nb.Set(b)
	if n := reads(t, "node-b"); n == 0 {
		t.Errorf("node-b, active by another instance's write this instance has not listed: no read; its view has it joining")
	}
	if _, err := f.s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads(t, "node-b"); n != 0 {
		t.Errorf("node-b, listed %s: its Ready Node made %d NetBox calls, want none", f.nb.Get(13).Owned.State, n)
	}
}

// TestJoinDeadlines: a joining node not Ready within the join deadline of its delivery fails its
// request, the journal naming the missing step; within the deadline nothing happens.
func TestJoinDeadlines(t *testing.T) {
	rows := []struct {
		name     string
		approved bool
		node     *fleet.NodeReport
		after    time.Duration // from the delivery
		want     string        // "" = still joining
	}{
		{"refuse/no CSR arrived", false, nil, 31 * time.Minute, "no CSR arrived"},
		{"refuse/no Node registered", true, nil, 31 * time.Minute, "no Node registered"},
		{"refuse/the Node's conditions", true, &fleet.NodeReport{Name: "node-a", Conditions: "Ready=False (KubeletNotReady: container runtime network not ready)"},
			31 * time.Minute, "Node node-a is not Ready: Ready=False (KubeletNotReady: container runtime network not ready)"},
		{"ok/within the deadline", false, nil, 29 * time.Minute, ""},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f := joinedFixture(t, r.approved)
			f.clock.Advance(testEpoch.Add(r.after).Sub(f.clock.Now()))
			devices, err := f.s.Requests.ReconcileAll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			f.s.Membership.JoinDeadlines(context.Background(), devices, func(name string) (fleet.NodeReport, bool) {
				if r.node != nil && name == r.node.Name {
					return *r.node, true
				}
				return fleet.NodeReport{}, false
			})
			d, j := f.nb.Get(12), f.nb.JournalOf(12)
			if r.want == "" {
				if d.Owned.State != fleet.StateJoining || len(j) != 0 {
					t.Errorf("node-a %s, journal %q; want joining, nothing journaled", d.Owned.State, j)
				}
				return
			}
			if d.Owned.State != fleet.StateFailed || d.Status != fleet.StatusFailed {
				t.Errorf("node-a %s/%s, want failed/failed", d.Owned.State, d.Status)
			}
			if len(j) != 1 || !strings.HasPrefix(j[0], "danger: ") || !strings.Contains(j[0], r.want) || !strings.Contains(j[0], "within 30m0s") {
				t.Errorf("journal %q, want one danger entry saying %q", j, r.want)
			}
			if n := labelled(t, f.reg, "fleetd_joins_total", "result", "timed_out"); n != 1 {
				t.Errorf("fleetd_joins_total{timed_out} = %v, want 1", n)
			}
			if b := f.nb.Get(13); b.Owned.State != fleet.StateJoining {
				t.Errorf("node-b, delivered at no recorded time, is %s", b.Owned.State)
			}
		})
	}
}

// A joining device renamed since its attestation fails at its join deadline, the journal saying
// so, though a Ready Node of its new name exists (another machine's).
func TestJoinDeadlineOfARenamedDevice(t *testing.T) {
	f := joinedFixture(t, true)
	renamed(f.nb, 12, "node-w")
	f.clock.Advance(testEpoch.Add(31 * time.Minute).Sub(f.clock.Now()))
	devices, err := f.s.Requests.ReconcileAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.s.Membership.JoinDeadlines(context.Background(), devices, func(name string) (fleet.NodeReport, bool) {
		return fleet.NodeReport{Name: name, Ready: true, ReadyAt: testEpoch.Add(30 * time.Minute)}, name == "node-w"
	})
	d, j := f.nb.Get(12), f.nb.JournalOf(12)
	if d.Owned.State != fleet.StateFailed || len(j) != 1 || !strings.Contains(j[0], "attested as node-a and renamed since") {
		t.Errorf("node-w %s, journal %q; want failed, the journal saying it was renamed since its attestation", d.Owned.State, j)
	}
}

// TestJoinWaitInPlanAndView: `fleetd plan` and `fleetd show` name the step a joining device
// waits for — its kubelet's CSR, then its Node — and nothing for a device that is not joining.
func TestJoinWaitInPlanAndView(t *testing.T) {
	for _, r := range []struct {
		name     string
		approved bool
		want     string
	}{
		{"ok/delivered, no CSR yet", false, "waits for its kubelet's client CSR (none approved yet)"},
		{"ok/CSR approved, Node not Ready", true, "client CSR csr-a approved at 2026-11-30T10:05:00Z; waits for Node node-a to register and be Ready"},
	} {
		t.Run(r.name, func(t *testing.T) {
			f := joinedFixture(t, r.approved)
			p, err := f.s.Review.Plan(context.Background(), "node-a", fleet.ActionNone)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(p.Why, "it is joining the cluster: ") || !strings.Contains(p.Why, r.want) {
				t.Errorf("plan: %q, want it to say %q", p.Why, r.want)
			}
			v, err := f.s.Views.View(context.Background(), "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(v.Joining, r.want) {
				t.Errorf("show: %q, want %q", v.Joining, r.want)
			}
			if v, _ := f.s.Views.View(context.Background(), "node-o"); v.Joining != "" {
				t.Errorf("an active device shows joining %q", v.Joining)
			}
		})
	}
}

// TestNodeReadyInTheSecondOfTheApproval: the API server keeps a heartbeat to the second, so one
// posted in the second fleetd approved the certificate (and recorded it to the nanosecond) is
// after the approval; one a second earlier is not.
func TestNodeReadyInTheSecondOfTheApproval(t *testing.T) {
	for _, r := range []struct {
		name  string
		at    time.Time
		ready bool
	}{
		{"ok/the same second", testEpoch.Add(5 * time.Minute), true},
		{"refuse/the second before", testEpoch.Add(5*time.Minute - time.Second), false},
	} {
		t.Run(r.name, func(t *testing.T) {
			f := joinedFixture(t, false)
			d := f.nb.Get(12)
			d.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-a", UID: "uid-a", Approved: testEpoch.Add(5*time.Minute + 300*time.Millisecond)}
			f.nb.Set(d)
			if _, err := f.s.Membership.NodeChanged(context.Background(), fleet.NodeReport{Name: "node-a", Ready: true, ReadyAt: r.at}); err != nil {
				t.Fatal(err)
			}
			if got := f.nb.Get(12).Owned.State == fleet.StateActive; got != r.ready {
				t.Errorf("active = %v, want %v", got, r.ready)
			}
		})
	}
}

package fleet

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A node leaves the workload cluster with its device (docs/design.md §1, "Leaving the
// cluster"): its Node is cordoned when a wipe or a retirement is claimed (nothing new is
// scheduled on a machine about to be erased; the operator drains it before, docs/runbooks.md),
// and deleted once the wipe is recorded on its receipt, so that no object of the erased machine
// is left for the scheduler, or for the next install of the same name to inherit cordoned. Like
// the SPIRE ban, neither holds the request up: a cordon that failed is tried again at each
// reconcile pass while the request runs, a deletion that failed at each pass while the device
// stays wiped or retired and the cluster still has the Node. A device whose request ended
// unconfirmed keeps its Node: nothing proves that machine was erased, and the authorization
// webhook refuses it meanwhile.

// nodeCallTimeout bounds one cordon or deletion, so that an unresponsive API server holds no
// decision for long.
const nodeCallTimeout = 15 * time.Second

// The steps and results of fleetd_node_cleanups_total.
const (
	NodeCordon = "cordon" // the Node marked unschedulable at the claim of a wipe or retirement
	NodeDelete = "delete" // the Node deleted once the wipe is recorded on its receipt

	NodeCleaned   = "done"   // fleetd changed the Node
	NodeUntouched = "none"   // nothing to change: no Node of the name, or already cordoned
	NodeFailed    = "failed" // the cluster could not be reached or refused: tried again
)

// nodeCleanup is the Node's part of a device's leaving, shared by the claim (Requests) and the
// listing's sweep.
type nodeCleanup struct {
	core    *core
	cluster Cluster // nil: no workload cluster, nothing to clean
	metrics *prometheus.CounterVec
	// cordoned keeps the "id request" of the requests whose Node is cordoned (or has none), so
	// that a pass asks the cluster once per request; failed keeps those whose failure is
	// journaled already, by step.
	cordoned sync.Map
	failed   sync.Map
}

// cordon marks d's Node unschedulable for its running wipe or retirement, once per request, and
// returns the sentence of the decision's log line ("" when there is nothing to say).
func (n *nodeCleanup) cordon(ctx context.Context, d Device, action Action) string {
	if n.cluster == nil || !bansSPIRE(action) {
		return ""
	}
	key := strconv.FormatInt(d.ID, 10) + " " + d.Owned.Request
	if _, done := n.cordoned.Load(key); done {
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
	defer cancel()
	changed, err := n.cluster.CordonNode(cctx, d.Name)
	if err != nil {
		return n.failure(ctx, d, NodeCordon, key, fmt.Sprintf("cluster: cordoning Node %s failed: %v; fleetd tries again at each reconcile pass while %s runs, which goes on meanwhile.",
			d.Name, err, d.Owned.Request))
	}
	n.cordoned.Store(key, true)
	n.failed.Delete(NodeCordon + " " + key)
	if !changed {
		n.metrics.WithLabelValues(NodeCordon, NodeUntouched).Inc()
		return ""
	}
	n.metrics.WithLabelValues(NodeCordon, NodeCleaned).Inc()
	msg := fmt.Sprintf("cluster: Node %s cordoned for %s: nothing new is scheduled on it; the pods it runs stay until the machine is wiped (drain it before setting decommissioning).",
		d.Name, d.Owned.Request)
	n.core.journal(ctx, d, JournalInfo, msg)
	return msg
}

// remove deletes the Node of d, a device whose wipe or retirement is recorded on its receipt,
// and returns the sentence of the decision's log line ("" when there is nothing to say: no
// cluster, no Node) and whether the cluster refused or could not be reached.
func (n *nodeCleanup) remove(ctx context.Context, d Device) (msg string, failed bool) {
	if n.cluster == nil {
		return "", false
	}
	key := strconv.FormatInt(d.ID, 10) + " " + d.Owned.Request
	cctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
	defer cancel()
	deleted, err := n.cluster.DeleteNode(cctx, d.Name)
	if err != nil {
		return n.failure(ctx, d, NodeDelete, key, fmt.Sprintf("cluster: deleting Node %s failed: %v; fleetd tries again at each reconcile pass while the cluster still has it.",
			d.Name, err)), true
	}
	n.failed.Delete(NodeDelete + " " + key)
	if !deleted {
		n.metrics.WithLabelValues(NodeDelete, NodeUntouched).Inc()
		return "", false
	}
	n.metrics.WithLabelValues(NodeDelete, NodeCleaned).Inc()
	msg = fmt.Sprintf("cluster: Node %s deleted: request %s is recorded on the machine's wipe receipt.", d.Name, d.Owned.Request)
	n.core.journal(ctx, d, JournalInfo, msg)
	return msg, false
}

// failure counts a failed step, journals its first failure for the request, and returns msg.
func (n *nodeCleanup) failure(ctx context.Context, d Device, step, key, msg string) string {
	n.metrics.WithLabelValues(step, NodeFailed).Inc()
	if _, journaled := n.failed.LoadOrStore(step+" "+key, true); !journaled {
		n.core.journal(ctx, d, JournalWarning, msg)
	}
	return msg
}

// RemoveLeftNodes deletes the Node of every wiped or retired device of the listing that the
// cluster still has (node is the cluster's Node of a name, as the Node watch last saw it): the
// retry of a deletion that failed at the receipt, or missed while fleetd was down. It costs the
// cluster nothing for a device whose Node is gone.
func (s *Requests) RemoveLeftNodes(ctx context.Context, devices []Device, node func(name string) (NodeReport, bool)) []Outcome {
	var outs []Outcome
	for _, d := range devices {
		if d.Owned.State != StateWiped && d.Owned.State != StateRetired {
			continue
		}
		if _, ok := node(d.Name); !ok {
			continue
		}
		msg, failed := s.nodes.remove(ctx, d)
		if msg == "" {
			continue
		}
		out := outcomeFor(d, RequestAction(d.Owned.Request), NodeDelete, "node-deleted")
		if failed {
			out.Result = "node-delete-failed"
		}
		out.Detail = msg
		outs = append(outs, out)
	}
	return outs
}

// newNodeCleanups is fleetd_node_cleanups_total: no device label, so the series stay six however
// large the fleet.
func newNodeCleanups() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetd_node_cleanups_total",
		Help: "What fleetd did to a leaving device's Node in the workload cluster, by step (cordon: at the claim of a wipe or retirement; delete: once the wipe is recorded on its receipt) and result: done, none (no Node, or nothing to change), failed (tried again at the next reconcile pass).",
	}, []string{"step", "result"})
}

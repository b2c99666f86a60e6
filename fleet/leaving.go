package fleet

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
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
//
// The Node is the one of the name the machine was attested as (nodeName), never merely the
// device's NetBox name, which any device editor may change: renaming a leaving device after a
// control plane node (or any node fleetd does not manage) must not make fleetd cordon or delete
// that node. The receipt's transition clears the identity, so a deletion that failed is retried
// from this process's own record of the name, not from the device as NetBox lists it later; a
// restart in between leaves that Node to the operator (counted failed, journaled).

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
	// pending keeps the deletions that failed, by device id: the request and the Node's name,
	// retried by RemoveLeftNodes while the device stays as the receipt left it.
	mu      sync.Mutex
	pending map[int64]pendingDelete
}

// pendingDelete is a Node deletion to try again.
type pendingDelete struct {
	request, node string
}

// attestedName is the name d's machine was attested as (IdentityMaterial.Name), the one its
// certificates carry, or, for an identity recorded before fleetd kept it, the device's name.
func attestedName(d Device) string {
	if n := d.Owned.Identity.Name; n != "" {
		return n
	}
	return d.Name
}

// nodeName is the name of d's Node: its attested name, lowercase as Kubernetes' node names are.
func nodeName(d Device) string { return strings.ToLower(attestedName(d)) }

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
	name := nodeName(d)
	changed, err := n.cluster.CordonNode(cctx, name)
	if err != nil {
		return n.failure(ctx, d, NodeCordon, key, fmt.Sprintf("cluster: cordoning Node %s failed: %v; fleetd tries again at each reconcile pass while %s runs, which goes on meanwhile.",
			name, err, d.Owned.Request))
	}
	n.cordoned.Store(key, true)
	n.failed.Delete(NodeCordon + " " + key)
	if !changed {
		n.metrics.WithLabelValues(NodeCordon, NodeUntouched).Inc()
		return ""
	}
	n.metrics.WithLabelValues(NodeCordon, NodeCleaned).Inc()
	msg := fmt.Sprintf("cluster: Node %s cordoned for %s: nothing new is scheduled on it; the pods it runs stay until the machine is wiped (drain it before setting decommissioning).",
		name, d.Owned.Request)
	n.core.journal(ctx, d, JournalInfo, msg)
	return msg
}

// remove deletes the Node of d, a device whose wipe or retirement is recorded on its receipt (d
// as read before that record, its identity still on it), and returns the sentence of the
// decision's log line ("" when there is nothing to say: no cluster, no Node) and whether the
// cluster refused or could not be reached; then the deletion is kept for RemoveLeftNodes.
func (n *nodeCleanup) remove(ctx context.Context, d Device) (msg string, failed bool) {
	if n.cluster == nil {
		return "", false
	}
	n.cordoned.Delete(strconv.FormatInt(d.ID, 10) + " " + d.Owned.Request) // the request has ended: its cordon is no longer asked
	return n.deleteNode(ctx, d, nodeName(d))
}

// deleteNode deletes the Node named of d's request, as remove says.
func (n *nodeCleanup) deleteNode(ctx context.Context, d Device, name string) (msg string, failed bool) {
	key := strconv.FormatInt(d.ID, 10) + " " + d.Owned.Request
	cctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
	defer cancel()
	deleted, err := n.cluster.DeleteNode(cctx, name)
	n.mu.Lock()
	if err != nil {
		if n.pending == nil {
			n.pending = map[int64]pendingDelete{}
		}
		n.pending[d.ID] = pendingDelete{request: d.Owned.Request, node: name}
	} else {
		delete(n.pending, d.ID)
	}
	n.mu.Unlock()
	if err != nil {
		return n.failure(ctx, d, NodeDelete, key, fmt.Sprintf("cluster: deleting Node %s failed: %v; fleetd tries again at each reconcile pass while the cluster still has it.",
			name, err)), true
	}
	n.failed.Delete(NodeDelete + " " + key)
	if !deleted {
		n.metrics.WithLabelValues(NodeDelete, NodeUntouched).Inc()
		return "", false
	}
	n.metrics.WithLabelValues(NodeDelete, NodeCleaned).Inc()
	msg = fmt.Sprintf("cluster: Node %s deleted: request %s is recorded on the machine's wipe receipt.", name, d.Owned.Request)
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

// RemoveLeftNodes tries again every Node deletion of this process that failed at a receipt, for
// the devices of the listing that are still as that receipt left them (wiped or retired, the same
// request): node is the cluster's Node of a name, as the Node watch last saw it, so a Node gone
// meanwhile costs the cluster nothing. A device that moved on (provisioned again) drops its
// deletion: its next install owns the name.
func (s *Requests) RemoveLeftNodes(ctx context.Context, devices []Device, node func(name string) (NodeReport, bool)) []Outcome {
	n := s.nodes
	n.mu.Lock()
	pending := maps.Clone(n.pending)
	n.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	var outs []Outcome
	for _, d := range devices {
		p, ok := pending[d.ID]
		if !ok {
			continue
		}
		if d.Owned.Request != p.request || d.Owned.State != StateWiped && d.Owned.State != StateRetired {
			n.forget(d.ID, p)
			continue
		}
		if _, ok := node(p.node); !ok {
			n.forget(d.ID, p)
			continue
		}
		msg, failed := n.deleteNode(ctx, d, p.node)
		out := outcomeFor(d, RequestAction(d.Owned.Request), NodeDelete, "node-deleted")
		if failed {
			out.Result = "node-delete-failed"
		}
		out.Detail = msg
		outs = append(outs, out)
	}
	return outs
}

// forget drops device id's pending deletion p, unless another replaced it meanwhile.
func (n *nodeCleanup) forget(id int64, p pendingDelete) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[id] == p {
		delete(n.pending, id)
	}
}

// newNodeCleanups is fleetd_node_cleanups_total: no device label, so the series stay six however
// large the fleet.
func newNodeCleanups() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetd_node_cleanups_total",
		Help: "What fleetd did to a leaving device's Node in the workload cluster, by step (cordon: at the claim of a wipe or retirement; delete: once the wipe is recorded on its receipt) and result: done, none (no Node, or nothing to change), failed (tried again at the next reconcile pass).",
	}, []string{"step", "result"})
}

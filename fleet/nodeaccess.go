package fleet

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NodeAccess answers the workload cluster's authorization webhook for its nodes (docs/operate.md,
// "Cluster membership"): the API server asks, before its Node and RBAC authorizers, about every
// request of a user in the group system:nodes. fleetd denies those of system:node:NAME whose
// device, by fleetd's sealed fields, is leaving or may not be trusted (refusalOf), and those of any
// node no device is named for unless the operator listed it as one fleetd does not manage; it
// never allows anything: for the rest it has no opinion, and Node and RBAC decide.
//
// It reads no NetBox per request: it decides on the view (nodeview.go). Until the first listing
// filled the view, and while the brake holds, it has no opinion about anyone.
type NodeAccess struct {
	core      *core
	view      *nodeView
	unmanaged map[string]bool // lowercased node names fleetd does not manage
	brake     *denyBrake
	metrics   *nodeAccessMetrics
}

// NodeAccessConfig is the webhook's policy (cluster.authorization in fleetd.yaml).
type NodeAccessConfig struct {
	// Unmanaged are the node names fleetd does not manage (a control plane installed by hand):
	// fleetd has no opinion about them.
	Unmanaged []string
	// BrakeShare: when more than this share of the nodes that asked lately would be denied (and
	// at least brakeMinDenied), fleetd stops denying. 0 means DefaultBrakeShare.
	BrakeShare float64
}

// DefaultBrakeShare is NodeAccessConfig.BrakeShare when unset.
const DefaultBrakeShare = 0.25

// The brake's bounds: it engages only when at least brakeMinDenied nodes would be denied (a
// retirement in a three-node lab is not a fleet-wide mistake), and it counts the nodes that asked
// within brakeWindow (a kubelet asks every few seconds; an erased machine stops asking), at most
// brakeMaxNodes of them.
const (
	brakeMinDenied = 3
	brakeWindow    = 10 * time.Minute
	brakeMaxNodes  = 100_000
	brakeEvery     = time.Second // how often the share is counted again
	brakeLogEvery  = time.Minute // how often a holding brake is logged
)

// NodeRequest is what the API server asks about: who, and what (for the log only).
type NodeRequest struct {
	User   string
	Groups []string
	// Verb, Resource, Subresource, Namespace and Name are the request's attributes (Path for a
	// non-resource request): they change no decision.
	Verb, Resource, Subresource, Namespace, Name, Path string
}

// NodeDecision is fleetd's answer.
type NodeDecision struct {
	Deny bool
	// Result is what the answer rests on: no-opinion, denied, unmanaged, braked (a denial the
	// brake withheld), not-built (no listing yet), not-a-node (not system:nodes).
	Result  string
	Node    string      // NAME of system:node:NAME, "" when the user is not of that form
	Devices []string    // the devices of that name
	Refusal NodeRefusal // why the node is refused (set for denied and braked)
}

// The results of NodeDecision.
const (
	NodeNoOpinion = "no-opinion"
	NodeDenied    = "denied"
	NodeUnmanaged = "unmanaged"
	NodeBraked    = "braked"
	NodeNotBuilt  = "not-built"
	NodeNotANode  = "not-a-node"
)

// nodeResults lists every result, for the metrics at zero.
var nodeResults = []string{NodeNoOpinion, NodeDenied, NodeUnmanaged, NodeBraked, NodeNotBuilt, NodeNotANode}

const nodeUserPrefix = "system:node:"

// Decide answers one request.
func (a *NodeAccess) Decide(r NodeRequest) NodeDecision {
	d := a.decide(r)
	a.metrics.decisions.WithLabelValues(d.Result).Inc()
	return d
}

func (a *NodeAccess) decide(r NodeRequest) NodeDecision {
	if !containsString(r.Groups, "system:nodes") {
		return NodeDecision{Result: NodeNotANode}
	}
	name, isNode := strings.CutPrefix(r.User, nodeUserPrefix)
	if !isNode {
		name = ""
	}
	if name != "" && a.unmanaged[strings.ToLower(name)] {
		return NodeDecision{Result: NodeUnmanaged, Node: name}
	}
	var (
		devices []string
		refusal NodeRefusal
		built   bool
	)
	devices, refusal, built = a.view.lookup(name)
	if !built {
		return NodeDecision{Result: NodeNotBuilt, Node: name}
	}
	switch {
	case name == "":
		refusal = NodeRefusal{NodeRefusedUnknownNode, fmt.Sprintf("user %q is in system:nodes but is not system:node:NAME: no device is named for it", capText(r.User, maxLoggedName))}
	case len(devices) == 0:
		refusal = NodeRefusal{NodeRefusedUnknownNode, fmt.Sprintf("no NetBox device is named %s and it is not among the nodes fleetd does not manage (cluster.authorization.unmanaged_nodes)", capText(name, maxLoggedName))}
	}
	if a.brake.asked(strings.ToLower(name), r.User, a.core.clock.Now(), a) {
		if refusal.Code != "" {
			return NodeDecision{Result: NodeBraked, Node: name, Devices: devices, Refusal: refusal}
		}
	}
	if refusal.Code == "" {
		return NodeDecision{Result: NodeNoOpinion, Node: name, Devices: devices}
	}
	return NodeDecision{Deny: true, Result: NodeDenied, Node: name, Devices: devices, Refusal: refusal}
}

// refused reports whether the node that asked as key (a lowercased node name, or the user for
// one not of that form) would be denied now, brake aside.
func (a *NodeAccess) refused(key string, user string) bool {
	if !strings.HasPrefix(user, nodeUserPrefix) {
		return true
	}
	devices, r, _ := a.view.lookup(key)
	return len(devices) == 0 || r.Code != ""
}

// BrakeHolds reports whether the brake holds now (the operator's view, a test).
func (a *NodeAccess) BrakeHolds() bool { return a.brake.holds() }

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// denyBrake stops the webhook denying when more than a share of the nodes that asked lately
// would be denied at once: a mistake (a seal key deployed wrong, a firmware update that fails
// every boot check, a bulk edit of NetBox) must not take a fleet's nodes out of the cluster. A
// node's standing is counted again from the view, so a change of the view moves the share without
// the node asking again.
type denyBrake struct {
	mu      sync.Mutex
	share   float64
	seen    map[string]brakeNode // who asked within brakeWindow
	counted time.Time            // when the share was last counted
	on      bool
	logged  time.Time // when a holding brake was last logged
	metrics *nodeAccessMetrics
}

type brakeNode struct {
	user string
	last time.Time
}

// asked records that a node asked at now and reports whether the brake holds.
func (b *denyBrake) asked(key, user string, now time.Time, a *NodeAccess) bool {
	if key == "" {
		key = "user " + user // a system:nodes member not named system:node:NAME
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[key]; ok || len(b.seen) < brakeMaxNodes {
		b.seen[key] = brakeNode{user: user, last: now}
	}
	if now.Sub(b.counted) < brakeEvery && !b.counted.IsZero() {
		return b.on
	}
	b.counted = now
	denied := 0
	for k, n := range b.seen {
		if now.Sub(n.last) > brakeWindow {
			delete(b.seen, k)
			continue
		}
		if a.refused(k, n.user) {
			denied++
		}
	}
	was := b.on
	b.on = denied >= brakeMinDenied && float64(denied) > b.share*float64(len(b.seen))
	b.metrics.brake.Set(boolGauge(b.on))
	b.metrics.wouldDeny.Set(float64(denied))
	b.metrics.asking.Set(float64(len(b.seen)))
	switch {
	case b.on && !was:
		b.metrics.engaged.Inc()
		b.logged = now
		a.core.log.Error().Int("would_deny", denied).Int("nodes", len(b.seen)).Float64("share", b.share).
			Msg("authorization brake engaged: more than the configured share of the nodes that asked would be denied; fleetd denies none until the share falls (docs/runbooks.md, \"Authorization brake\")")
	case b.on && now.Sub(b.logged) >= brakeLogEvery:
		b.logged = now
		a.core.log.Error().Int("would_deny", denied).Int("nodes", len(b.seen)).Float64("share", b.share).
			Msg("authorization brake holds: fleetd denies no node (docs/runbooks.md, \"Authorization brake\")")
	case !b.on && was:
		a.core.log.Warn().Int("would_deny", denied).Int("nodes", len(b.seen)).Msg("authorization brake released: fleetd denies again")
	}
	return b.on
}

func (b *denyBrake) holds() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.on
}

func boolGauge(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// nodeAccessMetrics are the webhook's series: no device or node name in any label.
type nodeAccessMetrics struct {
	decisions *prometheus.CounterVec
	brake     prometheus.Gauge
	engaged   prometheus.Counter
	wouldDeny prometheus.Gauge
	asking    prometheus.Gauge
}

func newNodeAccessMetrics() *nodeAccessMetrics {
	return &nodeAccessMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_authz_decisions_total",
			Help: "The cluster's authorization webhook's answers about its nodes' requests, by result: no-opinion, denied, unmanaged (a node fleetd does not manage), braked (a denial the brake withheld), not-built (no listing yet), not-a-node.",
		}, []string{"result"}),
		brake: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_authz_brake",
			Help: "1 while the authorization brake holds: more than cluster.authorization.deny_brake of the nodes that asked lately (and at least 3) would be denied, and fleetd denies none.",
		}),
		engaged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_authz_brake_engaged_total",
			Help: "Times the authorization brake engaged.",
		}),
		wouldDeny: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_authz_nodes_refused",
			Help: "Nodes that asked within the last 10 minutes and would be denied, brake aside, when last counted.",
		}),
		asking: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_authz_nodes_asking",
			Help: "Nodes (system:nodes users) that asked within the last 10 minutes, when last counted.",
		}),
	}
}

func (m *nodeAccessMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.brake, m.engaged, m.wouldDeny, m.asking}
}

// atZero creates every result at 0 (metrics.go, startAtZero).
func (m *nodeAccessMetrics) atZero() error {
	return atZero(m.decisions.MetricVec, nodeResults)
}

// newNodeAccess builds the use case on the core and the view the core's NetBox keeps.
func newNodeAccess(c *core, view *nodeView, cfg NodeAccessConfig, m *nodeAccessMetrics) (*NodeAccess, error) {
	share := cfg.BrakeShare
	if share == 0 {
		share = DefaultBrakeShare
	}
	if share < 0 || share > 1 {
		return nil, fmt.Errorf("the authorization brake's share %g is not between 0 and 1", share)
	}
	a := &NodeAccess{core: c, view: view, unmanaged: map[string]bool{}, metrics: m,
		brake: &denyBrake{share: share, seen: map[string]brakeNode{}, metrics: m}}
	for _, n := range cfg.Unmanaged {
		a.unmanaged[strings.ToLower(n)] = true
	}
	return a, nil
}

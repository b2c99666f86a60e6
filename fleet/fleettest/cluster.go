package fleettest

import (
	"context"
	"sync"

	"github.com/folly-infra/fleetd/fleet"
)

// Cluster is an in-memory workload cluster (fleet.Cluster): the bootstrap token Secrets fleetd
// made and the decisions it wrote on CSRs, each call failing with Fail when set.
type Cluster struct {
	mu        sync.Mutex
	Tokens    map[string]fleet.BootstrapTokenSecret // by token id
	Deleted   []string                              // token ids deleted, in order
	Decisions map[string]fleet.CSRDecision          // by CSR name
	// Nodes are the cluster's Nodes by name, true when cordoned; DeletedNodes the names deleted.
	Nodes        map[string]bool
	DeletedNodes []string
	Fail         error
}

// NewCluster is an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{Tokens: map[string]fleet.BootstrapTokenSecret{}, Decisions: map[string]fleet.CSRDecision{}, Nodes: map[string]bool{}}
}

// CreateBootstrapToken implements fleet.Cluster.
func (c *Cluster) CreateBootstrapToken(_ context.Context, t fleet.BootstrapTokenSecret) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return c.Fail
	}
	c.Tokens[t.Token.ID] = t
	return nil
}

// DeleteBootstrapToken implements fleet.Cluster.
func (c *Cluster) DeleteBootstrapToken(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return c.Fail
	}
	delete(c.Tokens, id)
	c.Deleted = append(c.Deleted, id)
	return nil
}

// DecideCSR implements fleet.Cluster.
func (c *Cluster) DecideCSR(_ context.Context, csr fleet.CSR, d fleet.CSRDecision) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return c.Fail
	}
	c.Decisions[csr.Name] = d
	return nil
}

// Decision is the decision written on the CSR named, ok false when none was.
func (c *Cluster) Decision(name string) (fleet.CSRDecision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.Decisions[name]
	return d, ok
}

// AddNode registers an uncordoned Node.
func (c *Cluster) AddNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Nodes[name] = false
}

// Node is the named Node: whether it exists and whether it is cordoned.
func (c *Cluster) Node(name string) (exists, cordoned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cordoned, exists = c.Nodes[name]
	return exists, cordoned
}

// CordonNode implements fleet.Cluster.
func (c *Cluster) CordonNode(_ context.Context, name string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return false, c.Fail
	}
	cordoned, ok := c.Nodes[name]
	if !ok || cordoned {
		return false, nil
	}
	c.Nodes[name] = true
	return true, nil
}

// DeleteNode implements fleet.Cluster.
func (c *Cluster) DeleteNode(_ context.Context, name string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return false, c.Fail
	}
	if _, ok := c.Nodes[name]; !ok {
		return false, nil
	}
	delete(c.Nodes, name)
	c.DeletedNodes = append(c.DeletedNodes, name)
	return true, nil
}

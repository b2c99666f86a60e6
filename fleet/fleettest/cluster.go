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
	Fail      error
}

// NewCluster is an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{Tokens: map[string]fleet.BootstrapTokenSecret{}, Decisions: map[string]fleet.CSRDecision{}}
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

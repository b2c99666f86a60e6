package config

import "time"

// Membership is the part of cluster: that joins nodes to the workload cluster (docs/operate.md,
// "The workload cluster"): fleetd's identity there, and how long a delivered node has to be Ready.
type Membership struct {
	// Kubeconfig is fleetd's own identity in the workload cluster, with the permissions of
	// examples/cluster/fleetd-rbac.yaml (not the Tinkerbell API's kubernetes.kubeconfig). Empty:
	// no workload cluster, and no class may join Kubernetes.
	Kubeconfig string `yaml:"kubeconfig"`
	// JoinDeadline is how long a delivered node of a joining class has until its Node is Ready;
	// the request fails after it. Unset: DefaultJoinDeadline.
	JoinDeadline Duration `yaml:"join_deadline"`
}

// DefaultJoinDeadline is cluster.join_deadline when unset.
const DefaultJoinDeadline = 30 * time.Minute

// MinJoinDeadline is the least cluster.join_deadline fleetd starts with: a real node needs
// minutes to boot and pull its images, and the deadline is the operator's to fit to that; below a
// minute it can only be a typo.
const MinJoinDeadline = time.Minute

func (c *Config) validateMembership(p *problems) {
	if c.Cluster.Kubeconfig != "" {
		p.file("cluster.kubeconfig", c.Cluster.Kubeconfig)
	}
	p.atLeast("cluster.join_deadline", c.Cluster.JoinDeadline, MinJoinDeadline)
}

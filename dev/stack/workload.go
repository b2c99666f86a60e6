package stack

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/folly-infra/fleetd/dev/kubecluster"
)

// The workload cluster of the stack (Options.WorkloadCluster; docs/operate.md "Cluster
// membership"): a real kube-apiserver and kube-controller-manager (dev/kubecluster) whose
// authorization configuration asks fleetd's SubjectAccessReview webhook first, and whose only
// controller signs CSRs; fleetd approves them. The Tinkerbell API (kubernetes.kubeconfig) stays
// the stack's other API server: a site's management cluster and workload cluster are two.

// WorkloadClusterInfo is stack.json's workload_cluster: the cluster the Talos machines join.
type WorkloadClusterInfo struct {
	URL string `json:"url"` // the API server's base URL
	// CA is the cluster CA's certificate (PEM file): it signs the API server's serving
	// certificate and every kubelet client certificate. A real Talos node has it from its machine
	// config's cluster.ca; the simulated kubelet reads it here, since this cluster's CA is not
	// the one of the stack's Talos secrets bundle.
	CA               string `json:"ca"`
	AdminKubeconfig  string `json:"admin_kubeconfig"`  // a system:masters user
	FleetdKubeconfig string `json:"fleetd_kubeconfig"` // fleetd's own identity (cluster.kubeconfig)
	Webhook          string `json:"webhook"`           // the URL the API server posts SubjectAccessReviews to
	Dir              string `json:"dir"`               // etcd's data, the certificates and the programs' logs
}

// workloadConf is what fleetd.yaml's cluster: section is written from.
type workloadConf struct {
	kubeconfig                  string
	listen, cert, key, clientCA string
	joinDeadline                string // "" leaves fleetd's default
}

// startWorkloadCluster starts the cluster with fleetd's webhook at webhookURL (fleetd's
// cluster.authorization listener, not yet listening: the API server asks it per request only),
// applies examples/cluster/fleetd-rbac.yaml and Talos's bootstrap binding, and writes fleetd's
// kubeconfig there.
func (s *Stack) startWorkloadCluster(ctx context.Context, webhookURL string) error {
	dir := filepath.Join(s.paths.dir, "workload-cluster")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("start the workload cluster: %w", err)
	}
	c, err := kubecluster.Start(ctx, kubecluster.Options{Root: s.opts.Root, Dir: dir, Signer: true,
		Webhook: &kubecluster.Webhook{URL: webhookURL}})
	if err != nil {
		return fmt.Errorf("start the workload cluster: %w", err)
	}
	s.workload = c
	ca := filepath.Join(dir, "cluster-ca.pem")
	if err := os.WriteFile(ca, c.CAPEM(), 0o644); err != nil {
		return fmt.Errorf("start the workload cluster: write its CA: %w", err)
	}
	fleetdKube := filepath.Join(s.paths.secrets, "workload-kubeconfig")
	if err := c.WriteUserKubeconfig(fleetdKube, "fleetd"); err != nil {
		return fmt.Errorf("start the workload cluster: fleetd's kubeconfig: %w", err)
	}
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return fmt.Errorf("start the workload cluster: %w", err)
	}
	if err := kubecluster.ApplyRBAC(ctx, admin, filepath.Join(s.opts.Root, "examples", "cluster", "fleetd-rbac.yaml")); err != nil {
		return err
	}
	if err := kubecluster.BindBootstrappers(ctx, admin); err != nil {
		return err
	}
	s.workloadInfo = &WorkloadClusterInfo{URL: c.URL(), CA: ca, AdminKubeconfig: c.AdminKubeconfig(),
		FleetdKubeconfig: fleetdKube, Webhook: webhookURL, Dir: dir}
	return nil
}

// workloadConf is fleetd's cluster: section for the running workload cluster, its webhook
// listener on webhookURL's address.
func (s *Stack) workloadConf(webhookURL string) (*workloadConf, error) {
	u, err := url.Parse(webhookURL)
	if err != nil {
		return nil, fmt.Errorf("the authorization webhook's URL %q: %w", webhookURL, err)
	}
	f := s.workload.WebhookFiles()
	w := &workloadConf{kubeconfig: s.workloadInfo.FleetdKubeconfig, listen: u.Host, cert: f.Cert, key: f.Key, clientCA: f.ClientCA}
	if s.opts.JoinDeadline != 0 {
		w.joinDeadline = s.opts.JoinDeadline.String()
	}
	return w, nil
}

// clusterSection is fleetd.yaml's cluster: section.
func (w *workloadConf) clusterSection() map[string]any {
	c := map[string]any{"kubeconfig": w.kubeconfig,
		"authorization": map[string]any{"listen": w.listen, "cert": w.cert, "key": w.key, "client_ca": w.clientCA}}
	if w.joinDeadline != "" {
		c["join_deadline"] = w.joinDeadline
	}
	return c
}

// stopWorkloadCluster stops the workload cluster, if one runs; its data stays for inspection.
func (s *Stack) stopWorkloadCluster() error {
	if s.workload == nil {
		return nil
	}
	return s.workload.Stop()
}

package stack

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/fleet"
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
	if err := applyFleetdRBAC(ctx, admin, filepath.Join(s.opts.Root, "examples", "cluster", "fleetd-rbac.yaml")); err != nil {
		return err
	}
	if err := bindBootstrappers(ctx, admin); err != nil {
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

// applyFleetdRBAC creates the objects of examples/cluster/fleetd-rbac.yaml, as an operator
// applies it: fleetd then has exactly the permissions the example grants.
func applyFleetdRBAC(ctx context.Context, admin kubernetes.Interface, file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read fleetd's RBAC example: %w", err)
	}
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var err error
		switch meta.Kind {
		case "ClusterRole":
			var o rbacv1.ClusterRole
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			}
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			}
		case "Role":
			var o rbacv1.Role
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
		case "RoleBinding":
			var o rbacv1.RoleBinding
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
		default:
			return fmt.Errorf("%s has a %q document, which the stack does not apply", file, meta.Kind)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apply %s %s: %w", file, meta.Kind, err)
		}
	}
	return nil
}

// bindBootstrappers binds the group of the nodes' bootstrap tokens to system:node-bootstrapper,
// as Talos's control plane does (its manifest system-bootstrap-node-bootstrapper): a bootstrap
// token may then create a CSR and read it back.
func bindBootstrappers(ctx context.Context, admin kubernetes.Interface) error {
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system-bootstrap-node-bootstrapper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: fleet.BootstrapGroup}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind %s to system:node-bootstrapper: %w", fleet.BootstrapGroup, err)
	}
	return nil
}

// stopWorkloadCluster stops the workload cluster, if one runs; its data stays for inspection.
func (s *Stack) stopWorkloadCluster() error {
	if s.workload == nil {
		return nil
	}
	return s.workload.Stop()
}

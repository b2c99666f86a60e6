// Package workload is fleetd's client of the workload cluster, the Kubernetes cluster the nodes
// of classes joining Kubernetes join (cluster.kubeconfig; docs/design.md §1, "Joining the
// cluster"). It implements fleet.Cluster: the bootstrap token Secrets in kube-system and the
// decisions on CertificateSigningRequests, the cordon and deletion of leaving devices' Nodes, and it feeds the kubelet signers' pending CSRs to
// fleet.Membership. fleetd's identity there is its own, with the ClusterRole of
// examples/cluster/fleetd-clusterrole.yaml (docs/operate.md, "The workload cluster").
package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/folly-infra/fleetd/fleet"
)

// TokenNamespace is where Kubernetes reads bootstrap token Secrets.
const TokenNamespace = "kube-system"

// The resources fleetd reads and writes there.
var (
	secretResource = corev1.SchemeGroupVersion.WithResource("secrets")
	csrResource    = certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	nodeResource   = corev1.SchemeGroupVersion.WithResource("nodes")
)

// Cluster is the workload cluster's client (fleet.Cluster), on client-go's dynamic client: as
// for Tinkerbell's objects (workflows/kube.go), not controller-runtime's client or client-go's
// clientset, whose packages register every built-in API group at start (docs/operate.md,
// "Memory"); objects travel as JSON, converted to the typed structs of k8s.io/api.
type Cluster struct {
	dyn dynamic.Interface
}

// New makes the client from the REST configuration of fleetd's identity in the cluster.
func New(cfg *rest.Config) (*Cluster, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("workload cluster client: %w", err)
	}
	return &Cluster{dyn: dyn}, nil
}

func toUnstructured(obj runtime.Object, kind string, gv string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(gv)
	u.SetKind(kind)
	return u, nil
}

func fromUnstructured(u *unstructured.Unstructured, obj any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
}

// tokenSecret is the Secret of a bootstrap token in the format of k8s.io/cluster-bootstrap's
// token/api: bootstrap-token-<id>, type bootstrap.kubernetes.io/token, usable for authentication
// only (a kubelet's token signs no cluster-info), with an RFC 3339 expiration that the controller
// manager's token cleaner deletes it at.
func tokenSecret(t fleet.BootstrapTokenSecret) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + t.Token.ID, Namespace: TokenNamespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "fleetd"}},
		Type: corev1.SecretType("bootstrap.kubernetes.io/token"),
		StringData: map[string]string{
			"token-id":                       t.Token.ID,
			"token-secret":                   t.Token.Secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              t.Group,
			"expiration":                     t.Expires.UTC().Format(time.RFC3339),
			"description":                    t.Description,
		},
	}
}

// CreateBootstrapToken implements fleet.Cluster: create, or replace the data of one of the same
// name (the same device and request derive the same token).
func (k *Cluster) CreateBootstrapToken(ctx context.Context, t fleet.BootstrapTokenSecret) error {
	s := tokenSecret(t)
	s.Data = map[string][]byte{}
	for key, v := range s.StringData { // the converter keeps stringData as it is; send data, as the API server stores it
		s.Data[key] = []byte(v)
	}
	s.StringData = nil
	u, err := toUnstructured(s, "Secret", "v1")
	if err != nil {
		return fmt.Errorf("encode Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	secrets := k.dyn.Resource(secretResource).Namespace(TokenNamespace)
	_, err = secrets.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// DeleteBootstrapToken implements fleet.Cluster.
func (k *Cluster) DeleteBootstrapToken(ctx context.Context, id string) error {
	name := "bootstrap-token-" + id
	if err := k.dyn.Resource(secretResource).Namespace(TokenNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", TokenNamespace, name, err)
	}
	return nil
}

// DecideCSR implements fleet.Cluster: the Approved or Denied condition through the approval
// subresource, on the CSR as the API server has it now. A CSR already decided is left as it is.
func (k *Cluster) DecideCSR(ctx context.Context, csr fleet.CSR, d fleet.CSRDecision) error {
	u, err := k.dyn.Resource(csrResource).Get(ctx, csr.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read CSR %s: %w", csr.Name, err)
	}
	cur := &certificatesv1.CertificateSigningRequest{}
	if err := fromUnstructured(u, cur); err != nil {
		return fmt.Errorf("read CSR %s: %w", csr.Name, err)
	}
	if string(cur.UID) != csr.UID {
		return fmt.Errorf("CSR %s was replaced (uid %s, decided on %s): it is decided when offered again", csr.Name, cur.UID, csr.UID)
	}
	if decided(cur) {
		return nil
	}
	typ := certificatesv1.CertificateDenied
	if d.Approve {
		typ = certificatesv1.CertificateApproved
	}
	cur.Status.Conditions = append(cur.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message,
		LastUpdateTime: metav1.Now(),
	})
	out, err := toUnstructured(cur, "CertificateSigningRequest", certificatesv1.SchemeGroupVersion.String())
	if err != nil {
		return fmt.Errorf("encode CSR %s: %w", csr.Name, err)
	}
	if _, err := k.dyn.Resource(csrResource).Update(ctx, out, metav1.UpdateOptions{}, "approval"); err != nil {
		return fmt.Errorf("write the decision on CSR %s: %w", csr.Name, err)
	}
	return nil
}

func decided(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// csrOf is what the approver decides on.
func csrOf(c *certificatesv1.CertificateSigningRequest) fleet.CSR {
	usages := make([]string, len(c.Spec.Usages))
	for i, u := range c.Spec.Usages {
		usages[i] = string(u)
	}
	return fleet.CSR{Name: c.Name, UID: string(c.UID), SignerName: c.Spec.SignerName, Username: c.Spec.Username,
		Groups: c.Spec.Groups, Usages: usages, Request: c.Spec.Request}
}

// cordonPatch is kubectl cordon's change: the Node unschedulable.
var cordonPatch = []byte(`{"spec":{"unschedulable":true}}`)

// CordonNode implements fleet.Cluster: spec.unschedulable set as kubectl cordon sets it, on the
// Node as the API server has it now; one already cordoned or missing is left as it is.
func (k *Cluster) CordonNode(ctx context.Context, name string) (bool, error) {
	nodes := k.dyn.Resource(nodeResource)
	u, err := nodes.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read Node %s: %w", name, err)
	}
	if cordoned, _, _ := unstructured.NestedBool(u.Object, "spec", "unschedulable"); cordoned {
		return false, nil
	}
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, cordonPatch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cordon Node %s: %w", name, err)
	}
	return true, nil
}

// DeleteNode implements fleet.Cluster.
func (k *Cluster) DeleteNode(ctx context.Context, name string) (bool, error) {
	err := k.dyn.Resource(nodeResource).Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("delete Node %s: %w", name, err)
	}
	return true, nil
}

// Reviewer decides a CSR (fleet.Membership.ReviewCSR).
type Reviewer interface {
	ReviewCSR(ctx context.Context, csr fleet.CSR) (fleet.CSRDecision, bool, error)
}

// WatchCSRs offers every undecided CSR of the kubelet signers to r, as the informer sees it
// (added, updated, and again at each resync, so a CSR fleetd could not decide is offered again),
// until ctx ends. resync is how often every pending CSR is offered again.
func (k *Cluster) WatchCSRs(ctx context.Context, r Reviewer, resync time.Duration) error {
	if resync <= 0 {
		return errors.New("watch CSRs: the resync period must be positive")
	}
	queue := make(chan *certificatesv1.CertificateSigningRequest, 256)
	offer := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		c := &certificatesv1.CertificateSigningRequest{}
		if err := fromUnstructured(u, c); err != nil || decided(c) || len(c.Status.Certificate) > 0 {
			return
		}
		if c.Spec.SignerName != fleet.SignerKubeletClient && c.Spec.SignerName != fleet.SignerKubeletServing {
			return
		}
		select {
		case queue <- c:
		case <-ctx.Done():
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: k.listWatch(csrResource), ObjectType: &unstructured.Unstructured{}, ResyncPeriod: resync,
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: offer, UpdateFunc: func(_, n any) { offer(n) }},
	})
	go ctrl.Run(ctx.Done())
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-queue:
			// The approver logs its decision and its errors; an undecided CSR comes back with
			// the next resync.
			_, _, _ = r.ReviewCSR(ctx, csrOf(c))
		}
	}
}

// listWatch lists and watches every object of a cluster-scoped resource.
func (k *Cluster) listWatch(r schema.GroupVersionResource) *cache.ListWatch {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return k.dyn.Resource(r).List(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return k.dyn.Resource(r).Watch(context.Background(), o)
		},
	}
}

// NodeReporter takes a Node's changes (fleet.Membership.NodeChanged).
type NodeReporter interface {
	NodeChanged(ctx context.Context, n fleet.NodeReport) (fleet.Outcome, error)
}

// Nodes is the Node watch's view: each Node's summary (nodeSummary), nothing else of it.
type Nodes struct {
	store cache.Store
}

// Node is the Node named as the watch last saw it, ok false when it has none.
func (n *Nodes) Node(name string) (fleet.NodeReport, bool) {
	if n == nil || n.store == nil {
		return fleet.NodeReport{}, false
	}
	obj, ok, err := n.store.GetByKey(name)
	if err != nil || !ok {
		return fleet.NodeReport{}, false
	}
	s, ok := obj.(*nodeSummary)
	if !ok {
		return fleet.NodeReport{}, false
	}
	return s.report, true
}

// WatchNodes tells r of every Node as it is added or changes, and again every resync, until ctx
// ends; the returned Nodes is the watch's view, for the join deadlines.
func (k *Cluster) WatchNodes(ctx context.Context, r NodeReporter, resync time.Duration, log func(fleet.Outcome, error)) (*Nodes, error) {
	if resync <= 0 {
		return nil, errors.New("watch Nodes: the resync period must be positive")
	}
	report := func(obj any) {
		if s, ok := obj.(*nodeSummary); ok {
			log(r.NodeChanged(ctx, s.report))
		}
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: k.listWatch(nodeResource), ObjectType: &unstructured.Unstructured{}, ResyncPeriod: resync,
		Handler:   cache.ResourceEventHandlerFuncs{AddFunc: report, UpdateFunc: func(_, n any) { report(n) }},
		Transform: summarizeNode,
	})
	go ctrl.Run(ctx.Done())
	return &Nodes{store: store}, nil
}

// nodeSummary is what the Node watch keeps of a Node: its report (nodeReport), made once when the
// Node arrives, and its resource version. The report's line of conditions is kept only while the
// Node is not Ready, the one case anything reads it (a join deadline's journal). A Node as the API
// server sends it is 4 to 20 KB, and the watch holds every Node of the cluster: at 10,000 nodes
// the summaries are about 2 MB (BenchmarkNodeStore, docs/performance.md).
type nodeSummary struct {
	report          fleet.NodeReport
	resourceVersion string
}

// GetObjectMeta names the summary for the informer's store and queue (meta.Accessor).
func (n *nodeSummary) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.report.Name, ResourceVersion: n.resourceVersion}
}

// summarizeNode is the watch's transform: a Node becomes its summary; anything else (a summary
// already, a deletion's tombstone) is kept as it is.
func summarizeNode(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	r, ok := nodeReport(u)
	if !ok {
		return nil, fmt.Errorf("watch Nodes: Node %s does not read as a Node", u.GetName())
	}
	if r.Ready {
		r.Conditions = ""
	}
	return &nodeSummary{report: r, resourceVersion: u.GetResourceVersion()}, nil
}

// nodeReport is what the join decision reads of a Node.
func nodeReport(u *unstructured.Unstructured) (fleet.NodeReport, bool) {
	if u == nil {
		return fleet.NodeReport{}, false
	}
	var n corev1.Node
	if err := fromUnstructured(u, &n); err != nil {
		return fleet.NodeReport{}, false
	}
	r := fleet.NodeReport{Name: n.Name}
	parts := make([]string, 0, len(n.Status.Conditions))
	for _, c := range n.Status.Conditions {
		p := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" || c.Message != "" {
			p += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
		parts = append(parts, p)
		if c.Type == corev1.NodeReady {
			r.Ready, r.ReadyAt = c.Status == corev1.ConditionTrue, c.LastHeartbeatTime.Time
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no conditions posted")
	}
	r.Conditions = strings.Join(parts, ", ")
	return r, true
}

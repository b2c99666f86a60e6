// Package workload is fleetd's client of the workload cluster, the Kubernetes cluster the nodes
// of classes joining Kubernetes join (cluster.kubeconfig; docs/design.md §1, "Joining the
// cluster"). It implements fleet.Cluster: the bootstrap token Secrets in kube-system and the
// decisions on CertificateSigningRequests, and it feeds the kubelet signers' pending CSRs to
// fleet.Approver. fleetd's identity there is its own, with the ClusterRole of
// examples/cluster/fleetd-clusterrole.yaml (docs/operate.md, "The workload cluster").
package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/fleet"
)

// TokenNamespace is where Kubernetes reads bootstrap token Secrets.
const TokenNamespace = "kube-system"

// Cluster is the workload cluster's client (fleet.Cluster).
type Cluster struct {
	c    client.Client // Secrets
	kube kubernetes.Interface
}

// New makes the client from the REST configuration of fleetd's identity in the cluster.
func New(cfg *rest.Config) (*Cluster, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("workload cluster client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("workload cluster client: %w", err)
	}
	return &Cluster{c: c, kube: kube}, nil
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
	err := k.c.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = k.c.Update(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// DeleteBootstrapToken implements fleet.Cluster.
func (k *Cluster) DeleteBootstrapToken(ctx context.Context, id string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: TokenNamespace}}
	if err := k.c.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// DecideCSR implements fleet.Cluster: the Approved or Denied condition through the approval
// subresource, on the CSR as the API server has it now. A CSR already decided is left as it is.
func (k *Cluster) DecideCSR(ctx context.Context, csr fleet.CSR, d fleet.CSRDecision) error {
	cur, err := k.kube.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
	if err != nil {
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
	if _, err := k.kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, cur, metav1.UpdateOptions{}); err != nil {
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

// Reviewer decides a CSR (fleet.Approver.ReviewCSR).
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
		c, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok || decided(c) || len(c.Status.Certificate) > 0 {
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
	lw := cache.NewListWatchFromClient(k.kube.CertificatesV1().RESTClient(), "certificatesigningrequests", "", fields.Everything())
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &certificatesv1.CertificateSigningRequest{}, ResyncPeriod: resync,
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

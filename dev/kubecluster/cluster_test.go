package kubecluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/folly-infra/fleetd/dev/kubecluster"
)

// cluster is the one control plane of this test binary (TestMain): the API server with Node and
// RBAC authorization and the CSR signer.
var cluster *kubecluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(kubecluster.Main(m, kubecluster.Options{Root: "../..", Signer: true}, func(c *kubecluster.Cluster) { cluster = c }))
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// A node's client certificate is a node's identity under the Node authorizer and NodeRestriction:
// it creates and reads its own Node, and may neither read nor create another's.
func TestNodeCertificateUnderNodeAuthorization(t *testing.T) {
	ctx := context.Background()
	admin := kubecluster.Clientset(t, cluster.AdminConfig())
	if _, err := admin.CoreV1().Nodes().Create(ctx, node("node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin creates node-b: %v", err)
	}
	cfg, err := cluster.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	a := kubecluster.Clientset(t, cfg)
	if _, err := a.CoreV1().Nodes().Create(ctx, node("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-a creates its own Node: %v", err)
	}
	got, err := a.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || got.Name != "node-a" {
		t.Fatalf("node-a reads its own Node: %v, %v", got.Name, err)
	}
	if _, err := a.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node-a reads node-b: want Forbidden (Node authorizer), got %v", err)
	}
	if _, err := a.CoreV1().Nodes().Create(ctx, node("node-c"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node-a creates node-c: want Forbidden (NodeRestriction), got %v", err)
	}
	// The same request without a client certificate is anonymous: no node's rights.
	anon := kubecluster.Clientset(t, &rest.Config{Host: cluster.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: cluster.CAPEM()}})
	if _, err := anon.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		t.Fatalf("anonymous reads node-a: want Forbidden or Unauthorized, got %v", err)
	}
}

// kube-controller-manager's signer signs an approved kubelet client CSR with the cluster CA for
// 24 hours, and the certificate it issues is that node's identity; a CSR nobody approves is
// never signed (no approving controller runs).
func TestSignerIssuesApprovedKubeletClientCertificates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := kubecluster.Clientset(t, cluster.AdminConfig())
	approved, approvedKey := kubeletCSR(t, "node-d")
	pending, _ := kubeletCSR(t, "node-e")
	for _, csr := range []*certificatesv1.CertificateSigningRequest{approved, pending} {
		if _, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CSR %s: %v", csr.Name, err)
		}
	}
	got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, approved.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Conditions = append(got.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by the test",
	})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, got.Name, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approve %s: %v", got.Name, err)
	}
	var certPEM []byte
	for certPEM == nil {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, approved.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Certificate) > 0 {
			certPEM = got.Status.Certificate
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the signer did not sign approved CSR %s: %v", approved.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("the signer's certificate is not PEM: %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.CAPEM())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the issued certificate does not chain to the cluster CA: %v", err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life > 24*time.Hour+10*time.Minute || life < 23*time.Hour {
		t.Errorf("the issued certificate lives %s, want 24h (--cluster-signing-duration, the signer backdates a few minutes)", life)
	}
	if cert.Subject.CommonName != "system:node:node-d" || strings.Join(cert.Subject.Organization, ",") != "system:nodes" {
		t.Errorf("issued subject %v, want CN system:node:node-d O system:nodes", cert.Subject)
	}
	d := kubecluster.Clientset(t, cluster.CertConfig(certPEM, approvedKey))
	if _, err := d.CoreV1().Nodes().Create(ctx, node("node-d"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-d, with the signed certificate, creates its own Node: %v", err)
	}
	if _, err := d.CoreV1().Nodes().Get(ctx, "node-d", metav1.GetOptions{}); err != nil {
		t.Fatalf("node-d reads its own Node: %v", err)
	}
	still, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, pending.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(still.Status.Certificate) != 0 || len(still.Status.Conditions) != 0 {
		t.Errorf("CSR %s nobody approved has conditions %v and a certificate of %d bytes: something approves CSRs", pending.Name, still.Status.Conditions, len(still.Status.Certificate))
	}
}

// kubeletCSR is a kubelet's client CSR for node name, as the kubelet makes it (ECDSA P-256,
// CN system:node:NAME, O system:nodes), and its key in PEM.
func kubeletCSR(t *testing.T, name string) (*certificatesv1.CertificateSigningRequest, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-" + name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// A bootstrap token Secret in kube-system authenticates its bearer as system:bootstrap:ID in the
// group system:bootstrappers (--enable-bootstrap-token-auth); a token with a wrong secret does not.
func TestBootstrapTokenAuthenticates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := kubecluster.Clientset(t, cluster.AdminConfig())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": "abcdef", "token-secret": "0123456789abcdef",
			"usage-bootstrap-authentication": "true",
			"expiration":                     time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}
	if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the bootstrap token: %v", err)
	}
	// The authenticator reads tokens through an informer: poll until it has this one.
	var review *authenticationv1.SelfSubjectReview
	for {
		r, err := kubecluster.Clientset(t, cluster.BootstrapConfig("abcdef.0123456789abcdef")).AuthenticationV1().SelfSubjectReviews().
			Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil {
			review = r
			break
		}
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("self subject review with the bootstrap token: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the bootstrap token never authenticated: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if u := review.Status.UserInfo; u.Username != "system:bootstrap:abcdef" || !contains(u.Groups, "system:bootstrappers") {
		t.Errorf("the bootstrap token authenticates as %q in %v, want system:bootstrap:abcdef in system:bootstrappers", u.Username, u.Groups)
	}
	_, err := kubecluster.Clientset(t, cluster.BootstrapConfig("abcdef.0000000000000000")).AuthenticationV1().SelfSubjectReviews().
		Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a wrong token secret: want Unauthorized, got %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The authorization configuration puts fleetd's webhook first, for system:nodes only, with no
// opinion when fleetd cannot answer, then Node, then RBAC; without a webhook, Node and RBAC.
func TestAuthorizationConfigOrder(t *testing.T) {
	with := kubecluster.AuthorizationConfig(&kubecluster.Webhook{URL: "https://127.0.0.1:1/x"}, "/k")
	for _, want := range []string{"failurePolicy: NoOpinion", "unauthorizedTTL: 30s", `- expression: "'system:nodes' in request.groups"`, "kubeConfigFile: /k"} {
		if !strings.Contains(with, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, with)
		}
	}
	if w, n, r := strings.Index(with, "type: Webhook"), strings.Index(with, "type: Node"), strings.Index(with, "type: RBAC"); w < 0 || w > n || n > r {
		t.Errorf("want Webhook, then Node, then RBAC:\n%s", with)
	}
	if without := kubecluster.AuthorizationConfig(nil, ""); strings.Contains(without, "Webhook") || !strings.Contains(without, "type: Node") {
		t.Errorf("without a webhook, want Node and RBAC only:\n%s", without)
	}
}

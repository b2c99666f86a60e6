package workload_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	mrand "math/rand"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/workload"
)

// kube is the one control plane of this test binary: kube-apiserver and kube-controller-manager
// v1.36.3 with the CSR signer alone, so nothing but fleetd approves a CSR.
var kube *kubecluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(kubecluster.Main(m, kubecluster.Options{Root: "..", Signer: true}, func(c *kubecluster.Cluster) { kube = c }))
}

// fleetdIdentity applies examples/cluster/fleetd-rbac.yaml and returns the admin's configuration
// impersonating the user it binds: fleetd with exactly the permissions the example grants.
func fleetdIdentity(t *testing.T) *rest.Config {
	t.Helper()
	if err := kubecluster.ApplyRBAC(context.Background(), kubecluster.Clientset(t, kube.AdminConfig()), "../examples/cluster/fleetd-rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(kube.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "fleetd"}
	return cfg
}

// talosBootstrapBinding binds the bootstrap group of fleetd's tokens to system:node-bootstrapper,
// as Talos's control plane does: a bootstrap token may then create a CSR.
func talosBootstrapBinding(t *testing.T) {
	t.Helper()
	if err := kubecluster.BindBootstrappers(context.Background(), kubecluster.Clientset(t, kube.AdminConfig())); err != nil {
		t.Fatal(err)
	}
}

// joiningFleet is node-a and node-b, delivered and joining, each attested for its own request.
func joiningFleet() *fleettest.NetBox {
	joining := func(id int64, name, addr, req string) fleet.Device {
		d := fleettest.Declared(id, name)
		d.Address, d.Declared.Class, d.Status = netip.MustParsePrefix(addr), "talos-member", fleet.StatusActive
		d.Owned = fleet.Owned{State: fleet.StateJoining, Request: req, Workflow: name + "-" + req, LAKSerial: "0a", LDevIDSerial: "0b"}
		return fleettest.Attested(d, "4c4c4544-0042-3510-8052-b4c04f4e3232", time.Now(), time.Hour)
	}
	return fleettest.NewNetBox(joining(12, "node-a", "10.0.0.5/24", "provision-aaaaaaaa"), joining(13, "node-b", "10.0.0.6/24", "provision-bbbbbbbb"))
}

func tokenOf(t *testing.T, id int64, req string) fleet.BootstrapToken {
	t.Helper()
	tok, err := fleettest.SealKeys().BootstrapToken(fleettest.SealKey().ID, id, req)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestKubeletBootstrapsThroughFleetd: against a real kube-apiserver and kube-controller-manager
// v1.36.3 with no approver of their own, fleetd runs with the permissions of
// examples/cluster/fleetd-rbac.yaml. It creates node-a's and node-b's bootstrap token Secrets as
// their attestations do; a kubelet-like client (client-go's certificate manager, as the kubelet
// bootstraps) with node-a's token gets a client certificate for system:node:node-a through a CSR
// that fleetd approves and the controller manager signs; the certificate authenticates as
// node-a; fleetd recorded the approval and deleted the token's Secret; node-a's Node, registered
// and posted Ready with that certificate, moves node-a from joining to active. node-b's token asking for
// node-a's name gets its CSR denied, with fleetd's reason in the Denied condition.
func TestKubeletBootstrapsThroughFleetd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wl, err := workload.New(fleetdIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	talosBootstrapBinding(t)
	nb := joiningFleet()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: nb, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(),
			Clock: fleet.SystemClock{}, Random: mrand.New(mrand.NewSource(1)), Cluster: wl})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tokenOf(t, 12, "provision-aaaaaaaa"), tokenOf(t, 13, "provision-bbbbbbbb")
	for _, tok := range []fleet.BootstrapToken{a, b} {
		if err := wl.CreateBootstrapToken(ctx, fleet.BootstrapTokenSecret{Token: tok, Group: fleet.BootstrapGroup,
			Expires: time.Now().Add(time.Hour), Description: "fleetd test"}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		if err := wl.WatchCSRs(ctx, s.Membership, 2*time.Second); err != nil {
			t.Error(err)
		}
	}()

	// node-a's kubelet bootstraps with its own token.
	store, err := certificate.NewFileStore("kubelet-client", t.TempDir(), t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			if current != nil {
				certPEM, keyPEM := pairPEM(t, current)
				return kubernetes.NewForConfig(kube.CertConfig(certPEM, keyPEM))
			}
			return kubernetes.NewForConfig(kube.BootstrapConfig(a.String()))
		},
		Template:         &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}}},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		CertificateStore: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr.Start()
	defer mgr.Stop()
	var cert *tls.Certificate
	for cert = mgr.Current(); cert == nil; cert = mgr.Current() {
		select {
		case <-ctx.Done():
			t.Fatal("node-a's kubelet got no client certificate")
		case <-time.After(200 * time.Millisecond):
		}
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "system:node:node-a" || !slices.Equal(leaf.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("certificate subject %s", leaf.Subject)
	}
	certPEM, keyPEM := pairPEM(t, cert)
	review, err := kubecluster.Clientset(t, kube.CertConfig(certPEM, keyPEM)).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != "system:node:node-a" {
		t.Errorf("the certificate authenticates as %+v (%v), want system:node:node-a", review, err)
	}
	if got := nb.Get(12).Owned.Identity.KubeletClient; got == nil {
		t.Error("fleetd recorded no approval on node-a")
	}
	admin := kubecluster.Clientset(t, kube.AdminConfig())
	if _, err := admin.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+a.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node-a's used token Secret: %v, want it deleted", err)
	}

	// node-a's kubelet registers its Node with that certificate and posts it Ready: fleetd's
	// Node watch moves node-a to active.
	nodes, err := wl.WatchNodes(ctx, s.Membership, time.Minute, func(fleet.Outcome, error) {})
	if err != nil {
		t.Fatal(err)
	}
	kubelet := kubecluster.Clientset(t, kube.CertConfig(certPEM, keyPEM))
	t.Cleanup(func() { // one cluster serves the test binary: leave no Node for a next run (-count)
		if err := admin.CoreV1().Nodes().Delete(context.Background(), "node-a", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	n, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node-a registers its Node: %v", err)
	}
	if d := nb.Get(12); d.Owned.State != fleet.StateJoining {
		t.Fatalf("node-a is %s with its Node registered and not Ready, want joining", d.Owned.State)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node-a posts Ready: %v", err)
	}
	for nb.Get(12).Owned.State != fleet.StateActive {
		select {
		case <-ctx.Done():
			t.Fatalf("node-a is %s after its Node posted Ready", nb.Get(12).Owned.State)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if r, ok := nodes.Node("node-a"); !ok || !r.Ready {
		t.Errorf("the watch's view of node-a: %+v, %v", r, ok)
	}

	// node-a, now active, renews its client certificate and asks for a serving certificate
	// naming itself: both approved and signed. Once its device is wiping, its renewal is denied.
	ask := func(signer string, usages []certificatesv1.KeyUsage, tmpl *x509.CertificateRequest) (string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		name, uid, err := csr.RequestCertificate(kubelet, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "", signer, nil, usages, key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = csr.WaitForCertificate(ctx, admin, name, uid)
		return name, err
	}
	clientUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	nodeSubject := pkix.Name{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}}
	if _, err := ask(certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, &x509.CertificateRequest{Subject: nodeSubject}); err != nil {
		t.Errorf("node-a's renewal: %v, want a certificate", err)
	}
	if _, err := ask(certificatesv1.KubeletServingSignerName, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		&x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"node-a"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}}); err != nil {
		t.Errorf("node-a's serving certificate: %v, want one", err)
	}
	// node-a's owner asks for a wipe: its claim cordons the Node (fleetd's identity patches it),
	// and node-a's renewal is denied from then on.
	nb.WriteAs("owner", 12, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
	if out, err := s.Requests.Reconcile(ctx, 12); err != nil || out.Result != "accepted" || !strings.Contains(out.Detail, "Node node-a cordoned") {
		t.Fatalf("the wipe's claim: %+v, %v; want accepted, the Node cordoned", out, err)
	}
	if got, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil || !got.Spec.Unschedulable {
		t.Errorf("node-a's Node after the wipe's claim: %v; want it cordoned (spec.unschedulable)", err)
	}
	name, err := ask(certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, &x509.CertificateRequest{Subject: nodeSubject})
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("node-a's renewal while wiping: %v, want it denied", err)
	}
	if got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{}); err != nil || !deniedFor(got, "DeviceFailsItsChecks") {
		t.Errorf("node-a's renewal while wiping: %+v, %v; want denied DeviceFailsItsChecks", got.Status, err)
	}

	// node-b's token asks for node-a's name.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	name, uid, err := csr.RequestCertificate(kubecluster.Clientset(t, kube.BootstrapConfig(b.String())), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		"", certificatesv1.KubeAPIServerClientKubeletSignerName, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := csr.WaitForCertificate(ctx, admin, name, uid); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("node-b's token for node-a: %v, want the CSR denied", err)
	}
	got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var denied *certificatesv1.CertificateSigningRequestCondition
	for i, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateDenied {
			denied = &got.Status.Conditions[i]
		}
	}
	if denied == nil || denied.Reason != "TokenNotTheDevices" || len(got.Status.Certificate) != 0 {
		t.Errorf("CSR %s: conditions %+v, certificate %d bytes; want denied TokenNotTheDevices, none issued", name, got.Status.Conditions, len(got.Status.Certificate))
	}
	if _, err := admin.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+b.ID, metav1.GetOptions{}); err != nil {
		t.Errorf("node-b's token Secret after the denial: %v, want it kept", err)
	}

	// node-a's wipe is recorded on its receipt (its attestation, as the wipe's first action
	// records it, moved it to wiping): its Node is deleted.
	w := nb.Get(12)
	w.Owned.State = fleet.StateWiping
	nb.Set(w)
	receipt := attest.VerifiedReceipt{Receipt: attest.Receipt{DeviceID: 12, Device: "node-a", Request: w.Owned.Request, Action: string(fleet.ActionWipe),
		AKSHA256: strings.Repeat("ab", 32), AttestedAt: time.Now(),
		Report: attest.WipeReport{DiskSerial: w.Declared.DiskSerial, Method: "blkdiscard", Result: attest.WipeResultErased, Bytes: 1 << 30}}}
	if out, err := s.Requests.RecordWipeReceipt(ctx, receipt); err != nil || out.Result != fleet.ReceiptRecorded {
		t.Fatalf("node-a's wipe receipt: %+v, %v; want recorded", out, err)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node-a's Node after its wipe's receipt: %v; want it deleted", err)
	}
}

// pairPEM is a tls.Certificate's leaf and key as PEM.
func pairPEM(t *testing.T, c *tls.Certificate) (certPEM, keyPEM []byte) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Error(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// deniedFor reports whether the CSR carries a Denied condition with this reason and no certificate.
func deniedFor(c *certificatesv1.CertificateSigningRequest, reason string) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateDenied && cond.Reason == reason {
			return len(c.Status.Certificate) == 0
		}
	}
	return false
}

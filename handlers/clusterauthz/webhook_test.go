// Package clusterauthz_test holds fleetd's authorization webhook against the real kube-apiserver
// (dev/kubecluster). It is a package of its own, with tests only, so that the modules that test
// with the handlers' fixtures (interop/spire) do not take the control plane's dependencies.
package clusterauthz_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/render"
)

// syncBuffer is a log sink the webhook's server goroutines write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// webhookServer is fleetd's authorization webhook listener as fleetd serve runs it
// (handlers.NewAuthorization behind handlers.AuthorizationTLS), on addr.
type webhookServer struct {
	srv  *http.Server
	done chan error
}

func startWebhook(t *testing.T, addr string, files kubecluster.WebhookFiles, access handlers.NodeAccess, log zerolog.Logger) *webhookServer {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(files.ClientCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in the webhook's client CA file")
	}
	h, err := handlers.NewAuthorization(handlers.AuthorizationDeps{Access: access, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for i := 0; ; i++ { // the port was just given back by the last server on it
		if ln, err = net.Listen("tcp", addr); err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	w := &webhookServer{srv: &http.Server{Handler: h, TLSConfig: handlers.AuthorizationTLS(cert, pool), ReadHeaderTimeout: 5 * time.Second},
		done: make(chan error, 1)}
	go func() { w.done <- w.srv.ServeTLS(ln, "", "") }()
	return w
}

func (w *webhookServer) stop(t *testing.T) {
	t.Helper()
	if err := w.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-w.done; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("the webhook's server: %v", err)
	}
}

// clusterNode is a device whose node is in the cluster: active on its provision, boot checks ok.
func clusterNode(id int64, name, addr string) fleet.Device {
	d := fleettest.Declared(id, name)
	d.Address = netip.MustParsePrefix(addr)
	d.Status = fleet.StatusActive
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", BootCheck: fleet.BootCheckOK, LastBootCheck: time.Now()}
	return d
}

// talosControlPlane renders, for the API server's side of the webhook the harness minted, the
// Talos config fleetd serves a control plane node of a class that joins Kubernetes.
func talosControlPlane(t *testing.T) func(kubecluster.WebhookClient) ([]byte, error) {
	return func(wc kubecluster.WebhookClient) ([]byte, error) {
		clock := fleet.SystemClock{}
		secrets, err := render.GenerateTalosSecrets(clock)
		if err != nil {
			return nil, err
		}
		r, err := render.New(render.Config{TalosSecrets: secrets, TalosVersion: "v1.11", ClusterName: "lab", ClusterEndpoint: "https://10.0.0.2:6443",
			DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: netip.MustParseAddr("10.0.0.1"), Clock: clock, Random: rand.Reader,
			AuthzWebhook: &render.AuthzWebhook{URL: wc.URL, ServerCA: wc.ServerCA, ClientCert: wc.Cert, ClientKey: wc.Key}})
		if err != nil {
			return nil, err
		}
		d := clusterNode(9, "cp-1", "10.0.0.2/24")
		d.MACs, d.Declared.DiskSerial = []fleet.MAC{"3c:ec:ef:4c:4f:54"}, "S123"
		class := fleet.Class{Name: "talos-cp", Kind: fleet.KindTalos, Installable: true, JoinsKubernetes: true,
			Talos: &fleet.TalosClass{MachineType: "controlplane"}}
		nc, err := r.Render(d, class, fleet.NodeIdentity{BootstrapToken: fleet.BootstrapToken{ID: "cp1abc", Secret: "0123456789abcdef"}})
		if err != nil {
			return nil, err
		}
		t.Logf("the API server runs the authorization configuration of a rendered %s", nc.Summary)
		return nc.Body, nil
	}
}

// TestClusterWebhookEndsANodesAccess holds the webhook against the real kube-apiserver
// (dev/kubecluster) configured as fleetd renders a Talos control plane config and Talos v1.11.5
// writes it for the API server (docs/operate.md, "Cluster membership"): fleetd's webhook first,
// for system:nodes, no opinion on failure, unauthorizedTTL 30 s, then Node and RBAC. A node's client certificate
// reads its Node; once fleetd claims the wipe of its device (through the reconcile, as a NetBox
// request arrives), the same certificate's requests are refused 403 with fleetd's reason, as soon
// as the API server's cached answer lapses (at most unauthorizedTTL: the view denies at once),
// while the other node keeps working; and with fleetd's webhook stopped, requests are decided by
// Node and RBAC alone (no opinion on failure): an active node keeps working. Last, a device
// editor gives the wiping node's name to the other node's device: the wiping machine's
// certificate is still refused (renamed), where before fleetd recorded the attested name the
// API server let it label its Node.
func TestClusterWebhookEndsANodesAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var logs syncBuffer
	log := zerolog.New(&logs)
	attested := func(d fleet.Device) fleet.Device {
		return fleettest.Attested(d, "4c4c4544-0042-3510-8052-b4c04f4e3232", time.Now(), time.Hour) // fleet_identity records its name
	}
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{
		attested(clusterNode(1, "node-a", "10.0.0.11/24")), attested(clusterNode(2, "node-b", "10.0.0.12/24")),
	}})
	if _, err := f.Service.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cluster, err := kubecluster.Start(ctx, kubecluster.Options{Root: "../..",
		Webhook: &kubecluster.Webhook{URL: "https://" + addr + handlers.PathAuthorize, Talos: talosControlPlane(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	hook := startWebhook(t, addr, cluster.WebhookFiles(), f.Service.NodeAccess, log)
	nodeClient := func(name string) *kubernetes.Clientset {
		cfg, err := cluster.NodeConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	a, b := nodeClient("node-a"), nodeClient("node-b")
	for name, c := range map[string]*kubernetes.Clientset{"node-a": a, "node-b": b} {
		if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s registers its Node with fleetd's webhook asked first: %v", name, err)
		}
		if _, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s reads its Node: %v", name, err)
		}
	}
	if !strings.Contains(logs.String(), `"outcome":"no-opinion"`) {
		t.Fatalf("the API server did not ask fleetd's webhook (no decision line): %s", logs.String())
	}

	// The owner asks for node-a's wipe; fleetd claims it.
	f.Inv.WriteAs(fleettest.Owner, 1, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
	if _, err := f.Service.Requests.Reconcile(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if req := f.Inv.Get(1).Owned.Request; !strings.HasPrefix(req, "wipe-") {
		t.Fatalf("fleetd did not claim the wipe: request %q", req)
	}
	if d := f.Service.NodeAccess.Decide(fleet.NodeRequest{User: "system:node:node-a", Groups: []string{"system:nodes"}}); !d.Deny {
		t.Fatalf("the webhook's decision right after the claim: %+v, want denied", d)
	}
	claimed := time.Now()
	for {
		_, err := a.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			if !strings.Contains(err.Error(), "fleetd: device node-a is on wipe request") {
				t.Fatalf("node-a is refused, but not with fleetd's reason: %v", err)
			}
			t.Logf("node-a refused %s after the claim (the API server's cached answer lapses within unauthorizedTTL, 30 s): %v",
				time.Since(claimed).Round(time.Second), err)
			break
		}
		if err != nil {
			t.Fatalf("node-a reads its Node after the claim: %v, want 403 or, until the cached answer lapses, its Node", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node-a was never refused: %v", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	if _, err := b.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); err != nil {
		t.Fatalf("node-b, in good standing, reads its Node while node-a is refused: %v", err)
	}
	if !strings.Contains(logs.String(), `"outcome":"denied"`) {
		t.Errorf("no decision line of the denial")
	}

	// fleetd's webhook stops: the API server cannot reach it and has no opinion from it, so
	// Node and RBAC decide. Each request below is one the API server never asked fleetd about
	// (nothing cached): node-b keeps working. So does node-a: while fleetd is down nothing ends a
	// node's access but its certificate's expiry (docs/operate.md, "Cluster membership").
	hook.stop(t)
	for name, c := range map[string]*kubernetes.Clientset{"node-b": b, "node-a": a} {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease}}
		if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s creates its Lease while fleetd's webhook is down: %v", name, err)
		}
	}
	patch := []byte(`{"metadata":{"labels":{"example.org/checked":"yes"}}}`)
	if _, err := b.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("node-b patches its Node while fleetd's webhook is down: %v", err)
	}

	// Back up, fleetd refuses node-a's next new request at once (nothing cached for it).
	hook = startWebhook(t, addr, cluster.WebhookFiles(), f.Service.NodeAccess, log)
	defer hook.stop(t)
	if _, err := a.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node-a reads its Lease with fleetd's webhook back: %v, want 403", err)
	}
	if _, err := b.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-b", metav1.GetOptions{}); err != nil {
		t.Fatalf("node-b reads its Lease with fleetd's webhook back: %v", err)
	}

	// A device editor renames node-a's device (wiping) away and gives its name to node-b's device,
	// in good standing, so that node-a's certificate would be judged on node-b's device. The
	// rename reaches fleetd as NetBox's webhook would (a reconcile of each device), then in the
	// next pass's listing, which is what gave node-a's name to node-b's device before fleetd
	// recorded the attested name. node-a's next new request is refused as a renamed device's;
	// node-b's, its name now no device's.
	f.Inv.WriteAs(fleettest.Owner, 1, func(d *fleet.Device) { d.Name = "node-a-old" })
	f.Inv.WriteAs(fleettest.Owner, 2, func(d *fleet.Device) { d.Name = "node-a" })
	for _, id := range []int64{1, 2} {
		if _, err := f.Service.Requests.Reconcile(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Service.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	// A request Node and RBAC allow (a node labels its own Node), never asked before: nothing cached.
	relabel := []byte(`{"metadata":{"labels":{"example.org/renamed":"yes"}}}`)
	if _, err := a.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, relabel, metav1.PatchOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "was attested as node-b and renamed since") {
		t.Fatalf("node-a's certificate labels its Node after node-b's device took its name: %v, want 403 with fleetd's reason (renamed)", err)
	}
	if err := b.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, "node-b-renamed", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "no NetBox device is named node-b") {
		t.Fatalf("node-b's certificate after its device was renamed: %v, want 403 with fleetd's reason (unknown node)", err)
	}
}

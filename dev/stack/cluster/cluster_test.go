// Package cluster_test runs the development stack with its workload cluster
// (stack.Options.WorkloadCluster) and takes Talos machines through cluster membership end to
// end (docs/operate.md "Cluster membership"): fleetd as a separate process, the NetBox
// emulator's webhooks, the real Tinkerbell, a real kube-apiserver and kube-controller-manager
// asking fleetd's authorization webhook, and each machine's kubelet joining with the bootstrap
// token of the configuration it fetched. One stack, in a package of its own so that the other
// stack tests pay nothing for it; with -short it is not started and the test skips.
package cluster_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate/csr"

	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/dev/stack"
)

// The devices of this test, besides the example inventory (which it leaves alone).
var clusterDevices = []stack.SeedDevice{
	{Name: "member-ok", Class: "talos-worker"},         // joins: joining after its fetch, active once Ready; then wiped
	{Name: "member-not-ready", Class: "talos-worker"},  // its kubelet never posts Ready: fails at the join deadline
	{Name: "member-builder", Class: "nixos-builder"},   // joins nothing: active at delivery, as before
	{Name: "member-unattested", Class: "talos-worker"}, // never provisioned: no CSR may name it
}

// joinDeadline is fleetd's cluster.join_deadline here: long enough for the sub-tests before the
// last to run while member-not-ready waits (its failure is the last sub-test), short enough to
// keep the test's wait small.
const joinDeadline = 2 * time.Minute

// deadline is how long the test waits for something fleetd does in the background; generous,
// since the machine may be loaded. Nothing here measures speed.
const deadline = 90 * time.Second

var testStack *stack.Stack

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "stack-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster tests:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, err := stack.BuildFleetd(".", tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster tests:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	logw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	start := time.Now()
	testStack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(tmp, "state"), FleetdBinary: bin,
		MoreDevices: clusterDevices, ReconcileInterval: 5 * time.Second, WorkloadCluster: true, JoinDeadline: joinDeadline,
		LogLevel: "debug", Logger: zerolog.New(logw).Level(zerolog.WarnLevel).With().Timestamp().Logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster tests: start the stack:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "cluster tests: the stack with its workload cluster started in %s\n", time.Since(start).Round(time.Second))
	code := m.Run()
	if code != 0 {
		if b, err := os.ReadFile(testStack.Info().Fleetd.Log); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			fmt.Fprintf(os.Stderr, "cluster tests failed; fleetd's log, last lines:\n%s\n", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	if err := testStack.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster tests: stop the stack:", err)
	}
	return code
}

// TestClusterMembership: the issue of membership through the whole stack, in sequence on one
// stack. A Talos machine is joining once its configuration was fetched and active only once its
// Node is Ready; a NixOS builder is active at delivery; another device's bootstrap token, and
// any token for a machine that never attested, get no client certificate; an active node keeps
// working while fleetd is stopped; once a wipe starts, the node's own client certificate is
// refused 403 within 60 s and its renewal CSR is denied; a node whose kubelet never posts Ready
// fails at the join deadline with its Node's conditions in the journal.
func TestClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the development stack and its workload cluster are not started")
	}
	if testStack == nil { // TestMain fails the binary when the stack does not start: never here
		t.Fatal("the development stack was not started")
	}
	info := testStack.Info()
	admin := kubecluster.Clientset(t, adminConfig(t))

	// member-not-ready first: its join deadline runs from its delivery while the rest runs.
	// Its kubelet waits (none at boot), so that its unused token serves the refusals below.
	installed(t, "member-not-ready")
	boot(t, "member-not-ready", stack.KubeletNone)
	waitState(t, "member-not-ready", "joining", deadline)

	t.Run("ok/talos-joining-until-ready", func(t *testing.T) {
		installed(t, "member-ok")
		boot(t, "member-ok", stack.KubeletNone)
		d := waitState(t, "member-ok", "joining", deadline)
		if msg := d.Field("fleet_message"); msg == "" {
			t.Errorf("joining with no fleet_message")
		}
		// Still joining after a whole periodic reconcile (where fleetd checks the joining
		// devices' deadlines): the delivery alone does not make it active.
		waitReconciles(t, 2)
		if d := device(t, "member-ok"); d.Field("fleet_state") != "joining" {
			t.Fatalf("member-ok is %s with no kubelet yet, want joining", d.Field("fleet_state"))
		}
		if err := step(t, stack.Join, "member-ok", stack.KubeletReady); err != nil {
			t.Fatalf("member-ok's kubelet joins: %v", err)
		}
		waitState(t, "member-ok", "active", deadline)
		if got := metric(t, "fleetd_joins_total", "result", "ready"); got != 1 {
			t.Errorf("fleetd_joins_total{result=ready} %g, want 1", got)
		}
		n, err := admin.CoreV1().Nodes().Get(tctx(t), "member-ok", metav1.GetOptions{})
		if err != nil || !nodeReady(n) {
			t.Errorf("member-ok's Node: %v, %v; want it Ready", n, err)
		}
	})

	t.Run("ok/nixos-builder-active-as-before", func(t *testing.T) {
		installed(t, "member-builder")
		boot(t, "member-builder", stack.KubeletReady)
		// Active with no Node: its class does not join Kubernetes, so fleetd waits for none.
		waitState(t, "member-builder", "active", deadline)
	})

	token, err := stack.TalosBootstrapToken(info, "member-not-ready")
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := kubecluster.Clientset(t, &rest.Config{Host: info.WorkloadCluster.URL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: info.WorkloadCluster.CA}})
	for _, tc := range []struct{ name, node, reason string }{
		{"refuse/another-devices-token", "member-ok", "TokenNotTheDevices"},
		{"refuse/never-attested", "member-unattested", "TokenNotTheDevices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, err := requestClient(t, bootstrap, tc.node)
			if err == nil || !strings.Contains(err.Error(), "denied") {
				t.Errorf("member-not-ready's token asking for %s: %v, want the CSR denied", tc.node, err)
			}
			checkDenied(t, admin, name, tc.reason)
		})
	}

	certPEM, keyPEM, err := stack.KubeletCredentials(info, "member-ok")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := kubecluster.Clientset(t, &rest.Config{Host: info.WorkloadCluster.URL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: info.WorkloadCluster.CA, CertData: certPEM, KeyData: keyPEM}})

	t.Run("ok/active-node-works-while-fleetd-is-stopped", func(t *testing.T) {
		if err := testStack.StopFleetd(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := testStack.StartFleetd(tctx(t)); err != nil {
				t.Fatalf("start fleetd again: %v", err)
			}
		}()
		// Requests the API server has not asked the webhook about before (no cached answer):
		// with fleetd unreachable it has no opinion, and the Node authorizer decides.
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "member-ok", Namespace: corev1.NamespaceNodeLease}}
		if _, err := kubelet.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(tctx(t), lease, metav1.CreateOptions{}); err != nil {
			t.Errorf("member-ok creates its Lease while fleetd is stopped: %v", err)
		}
		if _, err := kubelet.CoreV1().Nodes().Get(tctx(t), "member-ok", metav1.GetOptions{}); err != nil {
			t.Errorf("member-ok reads its Node while fleetd is stopped: %v", err)
		}
	})

	t.Run("refuse/wiping-node-loses-its-access", func(t *testing.T) {
		if _, err := kubelet.CoreV1().Nodes().Get(tctx(t), "member-ok", metav1.GetOptions{}); err != nil {
			t.Fatalf("member-ok reads its Node before the wipe: %v", err)
		}
		patch(t, "member-ok", map[string]any{"custom_fields": map[string]any{"desired_action": "wipe"}})
		waitState(t, "member-ok", "pending", deadline)
		// The bound: the node's requests are refused within 60 s of the wipe's start.
		var last error
		claimed := time.Now()
		end := claimed.Add(60 * time.Second)
		for ; time.Now().Before(end); time.Sleep(time.Second) {
			_, last = kubelet.CoreV1().Nodes().Get(tctx(t), "member-ok", metav1.GetOptions{})
			if apierrors.IsForbidden(last) {
				break
			}
		}
		if !apierrors.IsForbidden(last) {
			t.Fatalf("member-ok's client certificate 60 s into its wipe: %v, want 403", last)
		}
		t.Logf("member-ok's client certificate refused 403 %s after the wipe's claim was seen", time.Since(claimed).Round(time.Second))
		// A renewal made while fleetd is unreachable (the API server lets it through: no
		// opinion) is denied once fleetd is back.
		if err := testStack.StopFleetd(); err != nil {
			t.Fatal(err)
		}
		name, uid, err := createClientCSR(kubelet, "member-ok")
		if err != nil {
			t.Errorf("member-ok's renewal CSR while fleetd is stopped: %v, want it created", err)
		}
		if err := testStack.StartFleetd(tctx(t)); err != nil {
			t.Fatalf("start fleetd again: %v", err)
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(tctx(t), deadline)
			defer cancel()
			if _, err := csr.WaitForCertificate(ctx, admin, name, uid); err == nil || !strings.Contains(err.Error(), "denied") {
				t.Errorf("member-ok's renewal while wiping: %v, want it denied", err)
			}
			checkDenied(t, admin, name, "DeviceFailsItsChecks")
		}
	})

	t.Run("refuse/not-ready-fails-at-the-deadline", func(t *testing.T) {
		if err := step(t, stack.Join, "member-not-ready", stack.KubeletNotReady); err != nil {
			t.Fatalf("member-not-ready's kubelet joins: %v", err)
		}
		if d := device(t, "member-not-ready"); d.Field("fleet_state") != "joining" {
			t.Fatalf("member-not-ready is %s with its Node not Ready, want joining", d.Field("fleet_state"))
		}
		waitState(t, "member-not-ready", "failed", joinDeadline+deadline)
		var found bool
		for _, e := range journal(t, "member-not-ready") {
			if strings.Contains(e.Comments, "did not join the cluster") && strings.Contains(e.Comments, "KubeletNotReady") &&
				strings.Contains(e.Comments, "cni plugin not initialized") {
				found = true
			}
		}
		if !found {
			t.Errorf("member-not-ready's journal names no Node conditions: %+v", journal(t, "member-not-ready"))
		}
		if got := metric(t, "fleetd_joins_total", "result", "timed_out"); got != 1 {
			t.Errorf("fleetd_joins_total{result=timed_out} %g, want 1", got)
		}
	})
}

// installed takes a device through provision and netboot: the install Workflow succeeded and
// its configuration waits (configuring).
func installed(t *testing.T, name string) {
	t.Helper()
	patch(t, name, map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}})
	waitState(t, name, "pending", deadline)
	eventuallyOK(t, "netboot "+name, func() error {
		return stack.Netboot(tctx(t), testStack.Info(), name, stack.StepOptions{Out: testWriter{t}})
	})
	waitState(t, name, "configuring", deadline)
}

// eventuallyOK retries f (a netboot finds no Workflow until fleetd created it after its claim).
func eventuallyOK(t *testing.T, what string, f func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(time.Second)
	}
}

// boot is the installed OS's first boot, its kubelet as mode says.
func boot(t *testing.T, name string, mode stack.KubeletMode) {
	t.Helper()
	if err := step(t, stack.Boot, name, mode); err != nil {
		t.Fatalf("boot %s: %v", name, err)
	}
}

func step(t *testing.T, f func(context.Context, stack.Info, string, stack.StepOptions) error, name string, mode stack.KubeletMode) error {
	t.Helper()
	return f(tctx(t), testStack.Info(), name, stack.StepOptions{Out: testWriter{t}, Kubelet: mode})
}

// requestClient asks, through c, for a kubelet client certificate of node and waits for the
// CSR's end; it returns the CSR's name and the wait's error.
func requestClient(t *testing.T, c kubernetes.Interface, node string) (string, error) {
	t.Helper()
	name, uid, err := createClientCSR(c, node)
	if err != nil {
		t.Fatalf("create the CSR for %s: %v", node, err)
	}
	ctx, cancel := context.WithTimeout(tctx(t), deadline)
	defer cancel()
	_, err = csr.WaitForCertificate(ctx, c, name, uid)
	return name, err
}

// createClientCSR creates a kubelet client CSR for node (CN system:node:NODE, O system:nodes).
func createClientCSR(c kubernetes.Interface, node string) (string, types.UID, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		return "", "", err
	}
	return csr.RequestCertificate(c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "",
		certificatesv1.KubeAPIServerClientKubeletSignerName, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
}

// checkDenied checks that CSR name is denied for reason, with no certificate issued.
func checkDenied(t *testing.T, admin kubernetes.Interface, name, reason string) {
	t.Helper()
	got, err := admin.CertificatesV1().CertificateSigningRequests().Get(tctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateDenied && c.Reason == reason && len(got.Status.Certificate) == 0 {
			return
		}
	}
	t.Errorf("CSR %s: conditions %+v, certificate %d bytes; want denied %s, none issued", name, got.Status.Conditions, len(got.Status.Certificate), reason)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func adminConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", testStack.Info().WorkloadCluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), joinDeadline+2*deadline)
	t.Cleanup(cancel)
	return c
}

func device(t testing.TB, name string) stack.OwnerDevice {
	t.Helper()
	d, err := testStack.Owner().Device(tctx(t), name)
	if err != nil {
		t.Fatalf("read device %s: %v", name, err)
	}
	return d
}

func patch(t testing.TB, name string, body map[string]any) {
	t.Helper()
	if _, err := testStack.Owner().Patch(tctx(t), testStack.DeviceID(name), body); err != nil {
		t.Fatalf("PATCH device %s %v: %v", name, body, err)
	}
}

func journal(t testing.TB, name string) []stack.JournalEntry {
	t.Helper()
	j, err := testStack.Owner().Journal(tctx(t), testStack.DeviceID(name))
	if err != nil {
		t.Fatalf("read journal of %s: %v", name, err)
	}
	return j
}

// waitState waits up to within until the device's fleet_state is want.
func waitState(t testing.TB, name, want string, within time.Duration) stack.OwnerDevice {
	t.Helper()
	end := time.Now().Add(within)
	for {
		d, err := testStack.Owner().Device(tctx(t), name)
		if err == nil && d.Field("fleet_state") == want {
			return d
		}
		if time.Now().After(end) {
			t.Fatalf("%s fleet_state %s: not so after %s; last: %s (%v)", name, want, within, d.Field("fleet_state")+" "+d.Field("fleet_message"), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// metric sums the samples of a metric on fleetd's /metrics whose labels include the given
// pairs ("k", "v", ...).
func metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(testStack.Info().Fleetd.HTTPURL + "/metrics")
	if err != nil {
		t.Fatalf("read metric %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read metric %s: GET /metrics: %s", name, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`)
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); match && err == nil {
			sum += v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read metric %s: %v", name, err)
	}
	return sum
}

// waitReconciles waits until fleetd finished n more periodic reconciles than now.
func waitReconciles(t testing.TB, n int) {
	t.Helper()
	before := metric(t, "fleetd_reconcile_runs_total")
	end := time.Now().Add(deadline)
	for metric(t, "fleetd_reconcile_runs_total") < before+float64(n) {
		if time.Now().After(end) {
			t.Fatalf("no %d periodic reconciles within %s", n, deadline)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

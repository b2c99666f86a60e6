package stack

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate/csr"
)

// KubeletMode is what a simulated Talos machine's kubelet does at its first boot when the stack
// runs a workload cluster (Options.WorkloadCluster, StepOptions.Kubelet).
type KubeletMode string

// The kubelet modes. A stack without a workload cluster runs no kubelet at all.
const (
	// KubeletReady joins: its client certificate through a CSR made with the bootstrap token
	// of the configuration it fetched, its Node registered with that certificate and posted
	// Ready. The default.
	KubeletReady KubeletMode = ""
	// KubeletNotReady joins as KubeletReady does but posts its Node not Ready (a node whose
	// network plugin never starts), and never Ready.
	KubeletNotReady KubeletMode = "not-ready"
	// KubeletNone runs no kubelet: the configuration is fetched and nothing joins (its token
	// stays unused; Join runs the kubelet later).
	KubeletNone KubeletMode = "none"
)

// ParseKubeletMode reads fleetsim's --kubelet: ready, not-ready or none.
func ParseKubeletMode(s string) (KubeletMode, error) {
	switch s {
	case "ready", "":
		return KubeletReady, nil
	case string(KubeletNotReady), string(KubeletNone):
		return KubeletMode(s), nil
	}
	return "", fmt.Errorf("--kubelet %q: give ready (join and post Ready), not-ready (join, never Ready) or none (no kubelet)", s)
}

// kubeletDir is where the machine's kubelet keeps its client certificate and key, as a kubelet
// does in /var/lib/kubelet/pki.
const kubeletDir = "var/lib/kubelet/pki"

// The kubelet's client certificate and key under kubeletDir.
const (
	kubeletCertFile = "kubelet-client.crt"
	kubeletKeyFile  = "kubelet-client.key"
)

// Join is `fleetsim machine NAME join` (docs/design.md §8): the kubelet of a Talos machine
// whose first boot ran none (StepOptions.Kubelet none) starts, with the bootstrap token of the
// machine config that boot fetched, and joins the stack's workload cluster as o.Kubelet says.
func Join(ctx context.Context, info Info, name string, o StepOptions) error {
	mc, err := openMachine(info, name, "join", o.Out)
	if err != nil {
		return err
	}
	defer mc.close()
	body, err := os.ReadFile(mc.path(MachineDiskDir, talosConfigFile))
	if err != nil {
		return fmt.Errorf("join %s: %w: boot the Talos machine first (fleetsim machine %s boot --kubelet none)", name, err, name)
	}
	if o.Kubelet == KubeletNone {
		return fmt.Errorf("join %s: --kubelet none runs no kubelet: give ready or not-ready", name)
	}
	if err := mc.joinCluster(ctx, body, o.Kubelet); err != nil {
		return fmt.Errorf("join %s: %w", name, err)
	}
	return nil
}

// talosConfigFile is where Boot keeps the Talos machine config it fetched, on the machine's disk.
const talosConfigFile = "talos-machine-config.yaml"

// joinCluster is the kubelet's join, as a Talos node's kubelet does it (its TLS bootstrap):
// a CSR for CN system:node:NAME, O system:nodes, made with the configuration's cluster.token
// and the signer kubernetes.io/kube-apiserver-client-kubelet; once fleetd approved it and the
// controller manager signed it, the certificate is stored, the Node NAME is registered with it
// and its status posted (Ready, or not Ready).
func (mc *machine) joinCluster(ctx context.Context, config []byte, mode KubeletMode) error {
	w := mc.info.WorkloadCluster
	if w == nil {
		return errors.New("the stack runs no workload cluster: start it with the workload cluster (fleetsim up --workload-cluster)")
	}
	token, err := talosBootstrapToken(config)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(w.CA)
	if err != nil {
		return fmt.Errorf("read the workload cluster's CA: %w", err)
	}
	boot, err := kubernetes.NewForConfig(&rest.Config{Host: w.URL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	user := "system:node:" + mc.name
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: user, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		return err
	}
	name, uid, err := csr.RequestCertificate(boot, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "",
		certificatesv1.KubeAPIServerClientKubeletSignerName, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
	if err != nil {
		return fmt.Errorf("kubelet: create the client CSR with the configuration's bootstrap token: %w", err)
	}
	mc.say("kubelet: client CSR %s created for %s with the bootstrap token of its configuration", name, user)
	wait, cancel := context.WithTimeout(ctx, kubeletCSRWait)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wait, boot, name, uid)
	if err != nil {
		return fmt.Errorf("kubelet: client CSR %s: %w (fleetd approves it, kube-controller-manager signs it; see the CSR's conditions)", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	dir := mc.path(MachineDiskDir, kubeletDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, kubeletKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, kubeletCertFile), certPEM, 0o644); err != nil {
		return err
	}
	mc.say("kubelet: client certificate of CSR %s issued, kept as disk/%s/%s", name, kubeletDir, kubeletCertFile)
	kubelet, err := kubernetes.NewForConfig(&rest.Config{Host: w.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: certPEM, KeyData: keyPEM}})
	if err != nil {
		return err
	}
	return mc.registerNode(ctx, kubelet, mode)
}

// kubeletCSRWait bounds the wait for the client certificate: fleetd decides a CSR as it is
// created (and offers it again every 30 s), the signer signs an approved one at once.
const kubeletCSRWait = 2 * time.Minute

// registerNode registers the machine's Node (or takes the one an earlier install left) and
// posts its Ready condition, with a heartbeat of now.
func (mc *machine) registerNode(ctx context.Context, kubelet kubernetes.Interface, mode KubeletMode) error {
	n, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: mc.name,
		Labels: map[string]string{corev1.LabelHostname: mc.name}}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		n, err = kubelet.CoreV1().Nodes().Get(ctx, mc.name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubelet: register Node %s: %w", mc.name, err)
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	if mode == KubeletNotReady {
		ready.Status, ready.Reason = corev1.ConditionFalse, "KubeletNotReady"
		ready.Message = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	}
	n.Status.Conditions = []corev1.NodeCondition{ready}
	if _, err := kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelet: post Node %s's status: %w", mc.name, err)
	}
	mc.say("kubelet: Node %s registered, Ready %s (%s)", mc.name, ready.Status, ready.Reason)
	return nil
}

// talosBootstrapToken is cluster.token of a Talos machine config: the v1alpha1 document of the
// (possibly multi-document) YAML.
func talosBootstrapToken(config []byte) (string, error) {
	dec := yaml.NewDecoder(bytes.NewReader(config))
	for {
		var doc struct {
			Cluster struct {
				Token string `yaml:"token"`
			} `yaml:"cluster"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return "", errors.New("kubelet: the Talos machine config has no cluster.token, the bootstrap token a kubelet joins with")
		}
		if err != nil {
			return "", fmt.Errorf("kubelet: read the Talos machine config: %w", err)
		}
		if doc.Cluster.Token != "" {
			return doc.Cluster.Token, nil
		}
	}
}

// KubeletCredentials are the client certificate and key the machine's kubelet got when it
// joined (PEM), as it keeps them on its disk.
func KubeletCredentials(info Info, name string) (certPEM, keyPEM []byte, err error) {
	m, ok := info.Machines[name]
	if !ok {
		return nil, nil, fmt.Errorf("no machine %s in the stack", name)
	}
	dir := filepath.Join(m.Dir, MachineDiskDir, kubeletDir)
	if certPEM, err = os.ReadFile(filepath.Join(dir, kubeletCertFile)); err != nil {
		return nil, nil, fmt.Errorf("%s's kubelet client certificate: %w (has it joined?)", name, err)
	}
	if keyPEM, err = os.ReadFile(filepath.Join(dir, kubeletKeyFile)); err != nil {
		return nil, nil, fmt.Errorf("%s's kubelet key: %w", name, err)
	}
	return certPEM, keyPEM, nil
}

// TalosBootstrapToken is cluster.token of the Talos machine config the machine fetched at its
// first boot.
func TalosBootstrapToken(info Info, name string) (string, error) {
	m, ok := info.Machines[name]
	if !ok {
		return "", fmt.Errorf("no machine %s in the stack", name)
	}
	body, err := os.ReadFile(filepath.Join(m.Dir, MachineDiskDir, talosConfigFile))
	if err != nil {
		return "", fmt.Errorf("%s's Talos machine config: %w (boot it first)", name, err)
	}
	return talosBootstrapToken(body)
}

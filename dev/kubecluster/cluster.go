// Package kubecluster runs a real Kubernetes control plane for fleetd's cluster tests: the
// kube-apiserver and kube-controller-manager programs of Kubernetes v1.36.3, which
// scripts/tools.sh builds from interop/tinkerbell, on an embedded etcd (the one dev/kubeharness
// starts), all on loopback (docs/design.md §8).
//
// The API server is configured as a cluster fleetd serves is (docs/operate.md, "Cluster
// membership"): its own CA and serving certificate, client certificates of that CA, bootstrap
// tokens, the structured authorization configuration (fleetd's SubjectAccessReview webhook
// first, matched to the group system:nodes, then Node, then RBAC; with Webhook.Talos, the one
// Talos writes from a control plane config fleetd rendered) and the NodeRestriction admission
// plugin. kube-controller-manager, when asked for, runs its CSR signing controller
// only, signing with the cluster CA for 24 hours: no controller approves a CSR.
//
// It is for tests only; the production fleetd binary must never link it. Trust assumptions: the
// cluster listens on 127.0.0.1 only, and its CA keys are files in the data directory.
package kubecluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/rest"

	"github.com/folly-infra/fleetd/dev/kubeharness"
)

// Version is the Kubernetes whose programs the cluster runs (scripts/tools.sh builds them at
// this version).
const Version = "v1.36.3"

// Options configure Start.
type Options struct {
	// Root is the fleetd checkout: its scripts/tools.sh builds the programs (a no-op once they
	// are in the tools cache). Required.
	Root string
	// Dir holds etcd's data, the certificates, the configuration files and the programs' logs.
	// Empty means a new temporary directory, removed by Stop.
	Dir string
	// Webhook, when set, is fleetd's authorization webhook, listed first in the authorization
	// configuration. Nil: the configuration lists Node and RBAC only.
	Webhook *Webhook
	// Signer runs kube-controller-manager with its CSR signing controller only.
	Signer bool
}

// Webhook is where the API server asks fleetd, and how.
type Webhook struct {
	// URL is the SubjectAccessReview endpoint, https://127.0.0.1:PORT/PATH: the API server posts
	// to exactly this URL. The harness mints its serving certificate (WebhookFiles).
	URL string
	// UnauthorizedTTL is how long the API server caches an answer that did not allow the
	// request (a denial or no opinion); 0 means 30 s, the most fleetd's docs allow.
	UnauthorizedTTL time.Duration
	// Timeout is how long the API server waits for an answer; 0 means 3 s.
	Timeout time.Duration
	// Talos, when set, is where the authorization configuration comes from instead of
	// AuthorizationConfig: given the API server's side of the webhook (URL and the credentials
	// the harness minted), it returns a Talos control plane config (what fleetd renders), and
	// the harness writes the configuration and the kubeconfig from it as Talos's machined does
	// (talos.go). UnauthorizedTTL and Timeout are then the config's.
	Talos func(WebhookClient) ([]byte, error)
}

// WebhookClient is the API server's side of the webhook: the URL it posts to, the CA of the
// webhook's serving certificate, and a client certificate (and key) of the webhook's client CA,
// all PEM.
type WebhookClient struct {
	URL                 string
	ServerCA, Cert, Key []byte
}

// WebhookFiles are the files fleetd's webhook listener is configured with, minted by the harness
// from a CA of their own (not the cluster's, which signs every node's client certificate).
type WebhookFiles struct {
	Cert, Key string // the listener's serving certificate (127.0.0.1, localhost) and key
	ClientCA  string // the CA of the API server's client certificate
}

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	dir     string
	tempDir bool
	url     string

	ca         *authority // the cluster CA: serving, clients, the CSR signer
	webhookCA  *authority
	webhook    WebhookFiles
	admin      tls.Certificate
	adminPEM   [2][]byte // the admin's certificate and key
	adminKube  string
	etcd       *embed.Etcd
	apiserver  *process
	controller *process

	stopOnce sync.Once
	stopErr  error
}

// startTimeout bounds how long the API server may take to answer /readyz, and the controller
// manager to start its signer: generous, since the machine running the tests may be busy.
const startTimeout = 3 * time.Minute

// Start builds the programs (scripts/tools.sh; a missing or failing build is an error), starts
// etcd, the API server and, when asked, the controller manager, and returns once the API server
// answers /readyz and the signer runs. ctx bounds start-up only.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Root == "" {
		return nil, errors.New("kubecluster: Options.Root (the fleetd checkout) is required")
	}
	apiserverBin, err := tool(ctx, o.Root, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	var controllerBin string
	if o.Signer {
		if controllerBin, err = tool(ctx, o.Root, "kube-controller-manager"); err != nil {
			return nil, err
		}
	}
	c = &Cluster{dir: o.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "kubecluster-"); err != nil {
			return nil, fmt.Errorf("kubecluster: create a temporary data dir: %w", err)
		}
		c.tempDir = true
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			c = nil
		}
	}()
	port, err := freePort()
	if err != nil {
		return c, err
	}
	c.url = "https://127.0.0.1:" + strconv.Itoa(port)
	files, err := c.writeFiles(o.Webhook)
	if err != nil {
		return c, fmt.Errorf("kubecluster: write the cluster's files in %s: %w", c.dir, err)
	}
	etcd, etcdURL, err := kubeharness.StartEtcd(filepath.Join(c.dir, "etcd"))
	if err != nil {
		return c, err
	}
	c.etcd = etcd
	c.apiserver, err = startProcess("kube-apiserver", apiserverBin, apiserverArgs(port, etcdURL, files), filepath.Join(c.dir, "kube-apiserver.log"))
	if err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	if o.Signer {
		c.controller, err = startProcess("kube-controller-manager", controllerBin, controllerArgs(files), filepath.Join(c.dir, "kube-controller-manager.log"))
		if err != nil {
			return c, err
		}
		if err := c.controller.waitLog(ctx, signerStarted); err != nil {
			return c, err
		}
	}
	return c, nil
}

// tool is the path of a program scripts/tools.sh built (it builds it first if it must).
func tool(ctx context.Context, root, name string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "tools.sh"), "build", name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubecluster: scripts/tools.sh build %s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// clusterFiles are the paths the programs' flags name.
type clusterFiles struct {
	ca, caKey                string
	serving, servingKey      string
	saKey, saPub             string
	authz, controllerKubecfg string
}

// writeFiles writes the CAs, the certificates, the authorization configuration and the
// kubeconfigs into Dir.
func (c *Cluster) writeFiles(w *Webhook) (clusterFiles, error) {
	pki := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return clusterFiles{}, err
	}
	var f clusterFiles
	var err error
	if c.ca, err = newAuthority(pki, "ca", "kubecluster-ca"); err != nil {
		return f, err
	}
	f.ca, f.caKey = filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key")
	if f.serving, f.servingKey, err = c.ca.issueFiles(pki, "apiserver", leaf{cn: "kube-apiserver", server: true,
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}}); err != nil {
		return f, err
	}
	if f.saKey, f.saPub, err = writeServiceAccountKey(pki); err != nil {
		return f, err
	}
	adminCert, adminKey, err := c.ca.issue(leaf{cn: "kubecluster-admin", orgs: []string{"system:masters"}})
	if err != nil {
		return f, err
	}
	if c.admin, err = tls.X509KeyPair(adminCert, adminKey); err != nil {
		return f, err
	}
	c.adminPEM = [2][]byte{adminCert, adminKey}
	c.adminKube = filepath.Join(c.dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.adminKube, c.url, c.ca.pem, adminCert, adminKey); err != nil {
		return f, err
	}
	f.controllerKubecfg = c.adminKube
	if c.webhookCA, err = newAuthority(pki, "webhook-ca", "kubecluster-webhook-ca"); err != nil {
		return f, err
	}
	c.webhook.ClientCA = filepath.Join(pki, "webhook-ca.crt")
	if c.webhook.Cert, c.webhook.Key, err = c.webhookCA.issueFiles(pki, "webhook-serving", leaf{cn: "fleetd-webhook", server: true,
		dns: []string{"localhost"}, ips: []net.IP{net.IPv4(127, 0, 0, 1)}}); err != nil {
		return f, err
	}
	var webhookKube string
	if w != nil {
		clientCert, clientKey, err := c.webhookCA.issue(leaf{cn: "kube-apiserver-authz-webhook"})
		if err != nil {
			return f, err
		}
		if w.Talos != nil {
			body, err := w.Talos(WebhookClient{URL: w.URL, ServerCA: c.webhookCA.pem, Cert: clientCert, Key: clientKey})
			if err != nil {
				return f, fmt.Errorf("the Talos config: %w", err)
			}
			f.authz, err = writeTalosAuthorization(body, filepath.Join(c.dir, "talos"))
			return f, err
		}
		webhookKube = filepath.Join(c.dir, "authz-webhook.kubeconfig")
		if err := writeKubeconfig(webhookKube, w.URL, c.webhookCA.pem, clientCert, clientKey); err != nil {
			return f, err
		}
	}
	f.authz = filepath.Join(c.dir, "authorization-config.yaml")
	return f, os.WriteFile(f.authz, []byte(AuthorizationConfig(w, webhookKube)), 0o600)
}

// AuthorizationConfig is the API server's structured authorization configuration: fleetd's
// webhook first (when w is set; kubeconfig is its connection), for the group system:nodes only,
// no opinion when it cannot be asked; then Node, then RBAC. It is the configuration
// docs/operate.md ("Cluster membership") shows, with the test's URL and TTL.
func AuthorizationConfig(w *Webhook, kubeconfig string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n")
	if w != nil {
		ttl, timeout := w.UnauthorizedTTL, w.Timeout
		if ttl == 0 {
			ttl = 30 * time.Second
		}
		if timeout == 0 {
			timeout = 3 * time.Second
		}
		fmt.Fprintf(&b, `- type: Webhook
  name: fleetd
  webhook:
    timeout: %s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: NoOpinion
    authorizedTTL: 30s
    unauthorizedTTL: %s
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: %s
    matchConditions:
    - expression: "'system:nodes' in request.groups"
`, timeout, ttl, kubeconfig)
	}
	b.WriteString("- type: Node\n  name: node\n- type: RBAC\n  name: rbac\n")
	return b.String()
}

// apiserverArgs are kube-apiserver's flags: loopback only, client certificates of the cluster
// CA, bootstrap tokens, the authorization configuration, NodeRestriction.
func apiserverArgs(port int, etcdURL string, f clusterFiles) []string {
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + etcdURL,
		"--tls-cert-file=" + f.serving,
		"--tls-private-key-file=" + f.servingKey,
		"--client-ca-file=" + f.ca,
		"--enable-bootstrap-token-auth",
		"--authorization-config=" + f.authz,
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f.saPub,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		// The kubernetes Service's endpoints would be the advertise address, which may not be
		// loopback: without a reconciler the API server does not log that every 10 s.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=false",
		"--profiling=false",
		"--cert-dir=" + filepath.Dir(f.ca),
	}
}

// controllerArgs are kube-controller-manager's flags: only the CSR signing controller, with
// the cluster CA, for 24 hours; no serving port, no leader election.
func controllerArgs(f clusterFiles) []string {
	return []string{
		"--kubeconfig=" + f.controllerKubecfg,
		"--controllers=csrsigning",
		"--cluster-signing-cert-file=" + f.ca,
		"--cluster-signing-key-file=" + f.caKey,
		"--cluster-signing-duration=24h",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
	}
}

// signerStarted is what kube-controller-manager logs when the signer of kubelets' client
// certificates (signer kubernetes.io/kube-apiserver-client-kubelet) starts
// (pkg/controller/certificates/certificate_controller.go).
const signerStarted = `"Starting certificate controller" name="csrsigning-kubelet-client"`

// waitReady waits until /readyz answers 200 to the admin, or the API server exits.
func (c *Cluster) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c.tlsConfig(c.admin)}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-c.apiserver.done:
			return fmt.Errorf("kubecluster: kube-apiserver exited before it was ready (%v); its log %s ends: %s", c.apiserver.err, c.apiserver.log, logTail(c.apiserver.log))
		case <-ctx.Done():
			return fmt.Errorf("kubecluster: kube-apiserver not ready (%s): %w", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubecluster: kube-apiserver not ready after %s (%s); see its log %s", startTimeout, last, c.apiserver.log)
		}
	}
}

func (c *Cluster) tlsConfig(cert tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.cert)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// URL is the API server's base URL.
func (c *Cluster) URL() string { return c.url }

// Dir is the data directory.
func (c *Cluster) Dir() string { return c.dir }

// CAPEM is the cluster CA's certificate: it signs the API server's serving certificate and
// every client certificate the API server accepts (the signer's too).
func (c *Cluster) CAPEM() []byte { return append([]byte(nil), c.ca.pem...) }

// AdminKubeconfig is the path of a kubeconfig of a system:masters user.
func (c *Cluster) AdminKubeconfig() string { return c.adminKube }

// AdminConfig is a client configuration of a system:masters user. Each call returns a new copy.
func (c *Cluster) AdminConfig() *rest.Config {
	return c.certConfig(c.adminPEM[0], c.adminPEM[1])
}

// WebhookFiles are the serving certificate, key and client CA fleetd's webhook listener needs.
func (c *Cluster) WebhookFiles() WebhookFiles { return c.webhook }

// NodeCredentials mints a client certificate of the cluster CA for the kubelet of node name:
// CN system:node:NAME, O system:nodes, what the Node authorizer and NodeRestriction know a node
// by. It returns the certificate and key in PEM.
func (c *Cluster) NodeCredentials(name string) (certPEM, keyPEM []byte, err error) {
	return c.ca.issue(leaf{cn: "system:node:" + name, orgs: []string{"system:nodes"}})
}

// WriteUserKubeconfig writes a kubeconfig at path for user, a member of groups, authenticated
// by a client certificate of the cluster CA minted for it: an identity of its own in the
// cluster (the development stack's fleetd, bound by examples/cluster/fleetd-rbac.yaml).
func (c *Cluster) WriteUserKubeconfig(path, user string, groups ...string) error {
	certPEM, keyPEM, err := c.ca.issue(leaf{cn: user, orgs: groups})
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.url, c.ca.pem, certPEM, keyPEM)
}

// NodeConfig is a client configuration of node name's kubelet (NodeCredentials).
func (c *Cluster) NodeConfig(name string) (*rest.Config, error) {
	certPEM, keyPEM, err := c.NodeCredentials(name)
	if err != nil {
		return nil, err
	}
	return c.certConfig(certPEM, keyPEM), nil
}

// CertConfig is a client configuration that authenticates with a client certificate (PEM), one
// the signer issued for instance.
func (c *Cluster) CertConfig(certPEM, keyPEM []byte) *rest.Config {
	return c.certConfig(certPEM, keyPEM)
}

func (c *Cluster) certConfig(certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host: c.url,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: append([]byte(nil), c.ca.pem...), CertData: certPEM, KeyData: keyPEM,
		},
		QPS: 100, Burst: 200,
	}
}

// BootstrapConfig is a client configuration that authenticates with a bootstrap token
// (id.secret), as a kubelet does before it has a certificate.
func (c *Cluster) BootstrapConfig(token string) *rest.Config {
	return &rest.Config{Host: c.url, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.ca.pem...)}}
}

// Stop stops the controller manager and the API server (SIGTERM, then SIGKILL after 30 s), then
// etcd, and removes a temporary data directory. It is idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{c.controller, c.apiserver} {
			if p != nil {
				errs = append(errs, p.stop())
			}
		}
		if c.etcd != nil {
			c.etcd.Close()
		}
		if c.tempDir {
			errs = append(errs, os.RemoveAll(c.dir))
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubecluster: pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// process is one of the control plane's programs.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the exit, set before done is closed
}

// startProcess starts bin with args, its output in log, with only PATH and HOME in its
// environment; it dies with the test process (Pdeathsig).
func startProcess(name, bin string, args []string, log string) (*process, error) {
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubecluster: open %s's log: %w", name, err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + filepath.Dir(log)}
	cmd.Dir = filepath.Dir(log)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubecluster: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// waitLog waits until the process's log holds text, or it exits.
func (p *process) waitLog(ctx context.Context, text string) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(p.log); err == nil && strings.Contains(string(b), text) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("kubecluster: %s exited (%v) before its log said %s; it ends: %s", p.name, p.err, text, logTail(p.log))
		case <-ctx.Done():
			return fmt.Errorf("kubecluster: %s: waiting for %s in its log %s: %w", p.name, text, p.log, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("kubecluster: %s: no %s in its log %s after %s; it ends: %s", p.name, text, p.log, startTimeout, logTail(p.log))
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and waits; a program still running after 30 s is killed, and that is an
// error (it ignored SIGTERM).
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("kubecluster: %s did not stop within 30 s of SIGTERM and was killed; see its log %s", p.name, p.log)
	}
}

// logTail is the end of a log, for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

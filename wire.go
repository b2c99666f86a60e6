package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/cli"
	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/kea"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/render"
	"github.com/folly-infra/fleetd/webhook"
	"github.com/folly-infra/fleetd/workflows"
	"github.com/folly-infra/fleetd/workload"
)

// app is fleetd wired together. This file owns the wiring: wire and the parts it builds from the
// config; serve.go parses the flags and runs the app.
type app struct {
	cfg     *config.Config
	log     zerolog.Logger
	service *fleet.Service
	netbox  *netbox.Client
	install *workflows.Installer
	kea     *kea.Writer
	servers []listener
	keaPoke chan struct{}
	intake  *webhook.Intake
	// workload is the workload cluster (cluster.kubeconfig); nil when none is configured.
	workload *workload.Cluster
	up       *prometheus.GaugeVec
	deps     []handlers.ReadyCheck // what /readyz asks and probeLoop records
}

// wire builds every part from the config, reading the secrets from their files. Every failure
// names the config key it came from.
func wire(ctx context.Context, cfg *config.Config, log zerolog.Logger) (*app, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	devReg := prometheus.NewRegistry() // the per-device series, behind the metrics token
	sec, err := readSecrets(cfg)
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, keaPoke: make(chan struct{}, 1), up: newDependencyGauge(reg)}

	catalog, err := cli.LoadCatalog(cfg.Path(cfg.ClassesFile))
	if err != nil {
		return nil, fmt.Errorf("classes_file: %w", err)
	}
	refused, notes := cli.CheckCloudInit(catalog) // as fleetd check does: before any disk is erased for it
	if len(refused) > 0 {
		return nil, fmt.Errorf("classes_file: %s", strings.Join(refused, "; "))
	}
	for _, n := range notes {
		log.Warn().Str("check", "cloud-init").Msg(n)
	}
	a.netbox, err = netbox.New(netbox.Config{URL: cfg.NetBox.URL, Token: string(sec.netboxToken),
		Timeout: cfg.NetBox.Timeout.D(), Retries: cfg.NetBox.Retries, Logger: log, Registry: reg})
	if err != nil {
		return nil, fmt.Errorf("netbox: %w", err)
	}
	rc, err := workflows.LoadRESTConfig(cfg.Path(cfg.Kubernetes.Kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("kubernetes.kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = float32(cfg.Kubernetes.QPS), cfg.Kubernetes.Burst // client-side rate limit (config defaults)
	a.install, err = workflows.New(workflows.Config{RESTConfig: rc, Namespace: cfg.Kubernetes.Namespace,
		Version: workflows.Version(cfg.Kubernetes.TinkerbellVersion), Logger: log, Registry: reg})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	clock := fleet.SystemClock{}
	renderer, err := newRenderer(cfg, sec.talos, clock)
	if err != nil {
		return nil, err
	}
	att, err := newAttestation(cfg, sec.tokenKey, clock)
	if err != nil {
		return nil, err
	}
	if att.BootPolicy, err = cli.LoadBootPolicy(cfg.Path(cfg.Attestation.BootPolicyFile), catalog); err != nil {
		return nil, fmt.Errorf("attestation.boot_policy_file: %w", err)
	}
	if err := a.workloadCluster(cfg, catalog); err != nil {
		return nil, err
	}
	sp, err := newSPIRE(cfg, log)
	if err != nil {
		return nil, err
	}
	a.service, err = fleet.NewService(fleet.Config{FleetdURL: cfg.PublicURL, JoinDeadline: cfg.Cluster.JoinDeadline.D(),
		BootCheckMissingAfter: cfg.BootCheck.MissingAfter.D(), ConfigTTL: cfg.Delivery.PendingTTL.D(),
		ServiceUser: cfg.NetBox.ServiceUser, InventoryBootCheckWindow: cfg.Inventory.BootCheckWindow.D(),
		ChangeLogRetention: cfg.NetBox.ChangeLogRetention.D(),
		NodeAccess: fleet.NodeAccessConfig{Unmanaged: cfg.Cluster.Authorization.UnmanagedNodes,
			BrakeShare: *cfg.Cluster.Authorization.DenyBrake},
		// A pass over the whole fleet allocates a few MB per 1,000 devices that the runtime would
		// keep until its scavenger slowly returns it; one collection and release per pass (every
		// reconcile.interval, and the hourly inventory check) keeps fleetd's resident memory at
		// rest at what it holds (docs/operate.md, "Memory").
		AfterSweep: debug.FreeOSMemory}, fleet.Deps{NetBox: a.netbox, ChangeLog: a.netbox, Seal: sec.seal,
		Installer: a.install, Catalog: catalog, Renderer: renderer, Attest: att, Clock: clock, Cluster: a.clusterPort(),
		Random: rand.Reader, Logger: log, Registry: reg, DeviceRegistry: devReg, SPIRE: sp})
	if err != nil {
		return nil, err
	}
	a.intake, err = webhook.New(webhook.Config{Secret: sec.webhook, ServiceUser: cfg.NetBox.ServiceUser, Workers: cfg.NetBox.WebhookWorkers,
		Sources: cfg.WebhookSourcePrefixes()}, webhook.Deps{Reconciler: a.service.Requests, RefreshReservations: a.pokeKea, Logger: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	if len(cfg.NetBox.WebhookSources) == 0 {
		log.Warn().Msg("netbox.webhook_sources is not set: NetBox's webhooks share their read slots with every other host's bodies, which can hold them back; set NetBox's addresses (docs/operate.md)")
	}
	a.kea, err = newKeaWriter(cfg, log, reg)
	if err != nil {
		return nil, err
	}
	a.deps = []handlers.ReadyCheck{{Name: "netbox", Check: a.netbox.Ping}, {Name: "kubernetes", Check: a.install.Ping}}
	h, err := handlers.New(handlers.Deps{Enrollment: a.service.Enrollment, Delivery: a.service.Delivery, BootChecks: a.service.BootChecks, Requests: a.service.Requests,
		Review: a.service.Review, Views: a.service.Views, Webhooks: a.intake, Gatherer: reg, DeviceGatherer: devReg,
		MetricsToken: sec.metrics, Logger: log, OperatorToken: sec.operator, NeedTLS: cfg.TLS.Cert != "",
		NodeLimits: handlers.Limits{PerMinute: cfg.Limits.NodeRequestsPerMinute, Burst: cfg.Limits.NodeBurst},
		Ready:      a.deps, ReceiptTokens: att.Receipts, Receipts: a.service.Requests})
	if err != nil {
		return nil, err
	}
	a.servers = []listener{{key: "listen.http", srv: newHTTPServer(ctx, cfg.Listen.HTTP, h, log)}}
	if cfg.TLS.PlaintextForDevelopment { // config.Validate allows it only without tls.cert
		log.Warn().Str("listen", cfg.Listen.HTTP).Msg("tls.plaintext_for_development is set: node and operator routes are served on plain HTTP; never on a lab network")
	}
	if cfg.NetBox.PlaintextForDevelopment { // config.Validate allows it only with an http:// netbox.url
		log.Warn().Str("netbox", cfg.NetBox.URL).Msg("netbox.plaintext_for_development is set: fleetd's NetBox token and every decision it writes cross the network in clear; never outside a development stack on one host")
	}
	if cfg.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Path(cfg.TLS.Cert), cfg.Path(cfg.TLS.Key))
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		srv := newHTTPServer(ctx, cfg.Listen.HTTPS, h, log)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		a.servers = append(a.servers, listener{key: "listen.https", srv: srv, tls: true})
	}
	if err := a.authorizationListener(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// authorizationListener adds the cluster's authorization webhook's listener when
// cluster.authorization.listen is set: TLS with its own certificate, and only clients with a
// certificate of its client CA (docs/http.md, "The cluster's authorization webhook").
func (a *app) authorizationListener(ctx context.Context) error {
	az := a.cfg.Cluster.Authorization
	if az.Listen == "" {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(a.cfg.Path(az.Cert), a.cfg.Path(az.Key))
	if err != nil {
		return fmt.Errorf("cluster.authorization.cert, cluster.authorization.key: %w", err)
	}
	caPEM, err := os.ReadFile(a.cfg.Path(az.ClientCA))
	if err != nil {
		return fmt.Errorf("cluster.authorization.client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("cluster.authorization.client_ca: %s holds no PEM certificate: give the CA of the API server's webhook client certificate", a.cfg.Path(az.ClientCA))
	}
	h, err := handlers.NewAuthorization(handlers.AuthorizationDeps{Access: a.service.NodeAccess, Logger: a.log})
	if err != nil {
		return err
	}
	srv := newHTTPServer(ctx, az.Listen, h, a.log)
	srv.TLSConfig = handlers.AuthorizationTLS(cert, pool)
	a.servers = append(a.servers, listener{key: "cluster.authorization.listen", srv: srv, tls: true})
	return nil
}

// workloadCluster connects to the workload cluster (cluster.kubeconfig) when one is configured,
// and refuses to start when a class joins Kubernetes and none is: its nodes could not join.
func (a *app) workloadCluster(cfg *config.Config, catalog fleet.Catalog) error {
	if err := cli.CheckJoiningClasses(catalog, cfg.Cluster.Kubeconfig); err != nil {
		return err
	}
	if cfg.Cluster.Kubeconfig == "" {
		return nil
	}
	rc, err := workflows.LoadRESTConfig(cfg.Path(cfg.Cluster.Kubeconfig))
	if err != nil {
		return fmt.Errorf("cluster.kubeconfig: %w", err)
	}
	if a.workload, err = workload.New(rc); err != nil {
		return fmt.Errorf("cluster.kubeconfig: %w", err)
	}
	return nil
}

// clusterPort is the workload cluster as the domain's port: nil (no cluster) when none is
// configured, never a nil *workload.Cluster inside the interface.
func (a *app) clusterPort() fleet.Cluster {
	if a.workload == nil {
		return nil
	}
	return a.workload
}

// listener is one of fleetd's HTTP servers and the config key it comes from.
type listener struct {
	key string
	srv *http.Server
	tls bool
}

// newHTTPServer bounds every phase of a request, so a slow or stalled client holds nothing for
// long: headers within 5 s, the body within 30 s, the answer within 60 s. What net/http logs
// itself goes to log (httpErrorLog).
func newHTTPServer(ctx context.Context, addr string, h http.Handler, log zerolog.Logger) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }, ErrorLog: httpErrorLog(log)}
}

// secrets are the contents of the secret files the config names.
type secrets struct {
	netboxToken, webhook, operator, talos, tokenKey []byte
	metrics                                         []byte // nil without metrics.token_file
	seal                                            *fleet.SealKeys
}

// readSecrets reads every secret file and reports every one that is missing or empty.
func readSecrets(cfg *config.Config) (secrets, error) {
	var s secrets
	var errs []error
	read := func(dst *[]byte, key, path string) {
		b, err := cfg.ReadSecret(key, path)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = b
	}
	read(&s.netboxToken, "netbox.token_file", cfg.NetBox.TokenFile)
	read(&s.webhook, "netbox.webhook_secret_file", cfg.NetBox.WebhookSecretFile)
	read(&s.operator, "operator.token_file", cfg.Operator.TokenFile)
	read(&s.talos, "talos.secrets_file", cfg.Talos.SecretsFile)
	read(&s.tokenKey, "attestation.token_key_file", cfg.Attestation.TokenKeyFile)
	if cfg.Metrics.TokenFile != "" {
		read(&s.metrics, "metrics.token_file", cfg.Metrics.TokenFile)
	}
	keys := make([]fleet.SealKey, len(cfg.NetBox.SealKeys))
	for i, k := range cfg.NetBox.SealKeys {
		keys[i].ID = k.ID
		read(&keys[i].Secret, fmt.Sprintf("netbox.seal_keys[%d].file", i), k.File)
	}
	var err error
	if s.seal, err = fleet.NewSealKeys(keys...); err != nil {
		errs = append(errs, fmt.Errorf("netbox.seal_keys: %w", err))
	}
	return s, errors.Join(errs...)
}

// newAttestation builds the EK policy, the token sealer, the certificate issuer, and the boot
// check's LAK verifier and nonce sealer.
func newAttestation(cfg *config.Config, tokenKey []byte, clock fleet.Clock) (fleet.Attestation, error) {
	var bundle []byte
	if cfg.Attestation.EKPolicy == string(attest.EKPolicyHashCert) {
		b, err := os.ReadFile(cfg.Path(cfg.Attestation.EKCABundle))
		if err != nil {
			return fleet.Attestation{}, fmt.Errorf("attestation.ek_ca_bundle: %w", err)
		}
		bundle = b
	}
	ek, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: attest.EKPolicy(cfg.Attestation.EKPolicy), BundlePEM: bundle, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation: %w", err)
	}
	key, err := attest.ParseTokenKey(tokenKey)
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation.token_key_file: %w", err)
	}
	tokens, err := attest.NewTokenSealer(attest.TokenConfig{Key: key, Lifetime: cfg.Attestation.TokenLifetime.D(), Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation: %w", err)
	}
	ldevid, err := pki.LoadCA(cfg.Path(cfg.PKI.LDevID.Cert), cfg.Path(cfg.PKI.LDevID.Key))
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.ldevid: %w", err)
	}
	lak, err := pki.LoadCA(cfg.Path(cfg.PKI.LAK.Cert), cfg.Path(cfg.PKI.LAK.Key))
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.lak: %w", err)
	}
	issuer, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ldevid, LAK: lak, LDevIDLifetime: cfg.PKI.LDevID.Lifetime.D(),
		LAKLifetime: cfg.PKI.LAK.Lifetime.D(), LDevIDRenewAfter: cfg.PKI.LDevID.RenewAfter.D(), LAKRenewAfter: cfg.PKI.LAK.RenewAfter.D(),
		Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki: %w", err)
	}
	// The boot check trusts LAK certificates of the LAK CA (pki.lak.cert) and seals its nonces
	// under a key derived from the attestation token key (docs/boot-checks.md).
	lakVerifier, err := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: lak.Cert, Above: lak.Above, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.lak: %w", err)
	}
	nonces, err := attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: key, Lifetime: cfg.BootCheck.NonceLifetime.D(),
		Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("boot_check: %w", err)
	}
	// A wipe's receipt token is sealed under another key derived from the same token key, and
	// lives for the class's Workflow timeout plus the enrollment token's lifetime
	// (docs/http.md, "Wipe receipts").
	receipts, err := attest.NewReceiptSealer(attest.ReceiptConfig{TokenKey: key, Margin: cfg.Attestation.TokenLifetime.D(), Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation: %w", err)
	}
	return fleet.Attestation{EK: ek, Tokens: tokens, Issuer: issuer, LAK: lakVerifier, BootNonces: nonces, Receipts: receipts}, nil
}

func newRenderer(cfg *config.Config, talosSecrets []byte, clock fleet.Clock) (*render.Renderer, error) {
	var err error
	rc := render.Config{TalosSecrets: talosSecrets, TalosVersion: cfg.Talos.TalosVersion,
		ClusterName: cfg.Talos.ClusterName, ClusterEndpoint: cfg.Talos.Endpoint,
		KubernetesVersion: cfg.Talos.KubernetesVersion, Endpoints: cfg.Seed.Endpoints, NTP: cfg.Seed.NTP,
		Clock: clock, Random: rand.Reader}
	for _, s := range cfg.Seed.DNS {
		rc.DNS = append(rc.DNS, netip.MustParseAddr(s)) // validated by config
	}
	if cfg.Seed.Gateway != "" {
		rc.Gateway = netip.MustParseAddr(cfg.Seed.Gateway)
	}
	if rc.AuthzWebhook, err = authzWebhook(cfg); err != nil {
		return nil, err
	}
	r, err := render.New(rc)
	if err != nil {
		return nil, fmt.Errorf("talos/seed: %w", err)
	}
	return r, nil
}

// authzWebhook reads the API server's side of the authorization webhook, which the Talos control
// plane configs of joining classes carry (docs/operate.md, "Cluster membership"); nil when
// cluster.authorization.url and its keys are not set.
func authzWebhook(cfg *config.Config) (*render.AuthzWebhook, error) {
	az := cfg.Cluster.Authorization
	if !az.Rendered() {
		return nil, nil
	}
	w := &render.AuthzWebhook{URL: az.URL}
	for _, f := range []struct {
		key, path string
		dst       *[]byte
	}{{"server_ca", az.ServerCA, &w.ServerCA}, {"apiserver_cert", az.APIServerCert, &w.ClientCert}, {"apiserver_key", az.APIServerKey, &w.ClientKey}} {
		b, err := os.ReadFile(cfg.Path(f.path))
		if err != nil {
			return nil, fmt.Errorf("cluster.authorization.%s: %w", f.key, err)
		}
		*f.dst = b
	}
	return w, nil
}

func newKeaWriter(cfg *config.Config, log zerolog.Logger, reg prometheus.Registerer) (*kea.Writer, error) {
	kc := kea.Config{Path: cfg.Kea.ReservationsFile, ControlSocket: cfg.Kea.ControlSocket, Logger: log, Registry: reg}
	if cfg.Kea.Subnet != "" {
		kc.Subnet = netip.MustParsePrefix(cfg.Kea.Subnet).Masked()
	}
	w, err := kea.NewWriter(kc)
	if err != nil {
		return nil, fmt.Errorf("kea: %w", err)
	}
	return w, nil
}

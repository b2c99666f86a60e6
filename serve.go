package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/kea"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/webhook"
	"github.com/folly-infra/fleetd/workflows"
)

// serve runs the service until a signal arrives: the HTTP server, the periodic reconcile, the
// Workflow watch and the Kea reservations, each a task of one errgroup.
func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "fleetd.yaml", "the config file")
	listenHTTP := fs.String("listen-http", "", "override listen.http (host:port)")
	listenHTTPS := fs.String("listen-https", "", "override listen.https (host:port; needs tls in the config)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath, config.Override{ListenHTTP: *listenHTTP, ListenHTTPS: *listenHTTPS})
	if err != nil { // before log.format is known: JSON, the default, like every later line
		l := newLogger(config.Log{Level: "info"}, stderr)
		l.Error().Str("config", *cfgPath).Err(err).Msg("fleetd cannot start: the config is wrong")
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	routeLibraryLogs(log)
	app, err := wire(ctx, cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("fleetd cannot start")
		return 1
	}
	log.Info().Str("version", version).Str("listen", cfg.Listen.HTTP).Str("netbox", cfg.NetBox.URL).
		Str("namespace", cfg.Kubernetes.Namespace).Msg("fleetd serving")
	if err := app.run(ctx); err != nil {
		log.Error().Err(err).Msg("fleetd stopped")
		return 1
	}
	log.Info().Msg("fleetd stopped")
	return 0
}

// app is fleetd wired together.
type app struct {
	cfg     *config.Config
	log     zerolog.Logger
	service *fleet.Service
	netbox  *netbox.Client
	install *workflows.Installer
	kea     *kea.Writer
	servers []listener
	keaPoke chan struct{}
	up      *prometheus.GaugeVec
	deps    []handlers.ReadyCheck // what /readyz asks and probeLoop records
}

// wire builds every part from the config, reading the secrets from their files. Every failure
// names the config key it came from.
func wire(ctx context.Context, cfg *config.Config, log zerolog.Logger) (*app, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sec, err := readSecrets(cfg)
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, keaPoke: make(chan struct{}, 1), up: newDependencyGauge(reg)}

	catalog, err := loadCatalog(cfg.Path(cfg.ClassesFile))
	if err != nil {
		return nil, fmt.Errorf("classes_file: %w", err)
	}
	refused, notes := checkCloudInit(catalog) // as fleetd check does: before any disk is erased for it
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
	a.install, err = workflows.New(workflows.Config{RESTConfig: rc, Namespace: cfg.Kubernetes.Namespace, Logger: log, Registry: reg})
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
	if att.BootPolicy, err = loadBootPolicy(cfg.Path(cfg.Attestation.BootPolicyFile), catalog); err != nil {
		return nil, fmt.Errorf("attestation.boot_policy_file: %w", err)
	}
	a.service, err = fleet.NewService(fleet.Config{FleetdURL: cfg.PublicURL,
		BootCheckMissingAfter: cfg.BootCheck.MissingAfter.D(), ConfigTTL: cfg.Delivery.PendingTTL.D(),
		ServiceUser: cfg.NetBox.ServiceUser}, fleet.Deps{Inventory: a.netbox, ChangeLog: a.netbox,
		Installer: a.install, Catalog: catalog, Renderer: renderer, Attest: att, Clock: clock,
		Random: rand.Reader, Logger: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	intake, err := webhook.New(webhook.Config{Secret: sec.webhook,
		ServiceUser: cfg.NetBox.ServiceUser}, webhook.Deps{Reconciler: a.service, Undo: a.service, Inventory: a.pokeKea, Logger: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	a.kea, err = newKeaWriter(cfg, log, reg)
	if err != nil {
		return nil, err
	}
	a.deps = []handlers.ReadyCheck{{Name: "netbox", Check: a.netbox.Ping}, {Name: "kubernetes", Check: a.install.Ping}}
	h, err := handlers.New(handlers.Deps{Service: a.service, Webhooks: intake, Gatherer: reg, Logger: log,
		OperatorToken: sec.operator, NodesNeedTLS: cfg.TLS.Cert != "",
		NodeLimits: handlers.Limits{PerMinute: cfg.Limits.NodeRequestsPerMinute, Burst: cfg.Limits.NodeBurst},
		Ready:      a.deps})
	if err != nil {
		return nil, err
	}
	a.servers = []listener{{key: "listen.http", srv: newHTTPServer(ctx, cfg.Listen.HTTP, h, log)}}
	if cfg.TLS.PlaintextForDevelopment { // config.Validate allows it only without tls.cert
		log.Warn().Str("listen", cfg.Listen.HTTP).Msg("tls.plaintext_for_development is set: node routes are served on plain HTTP; never on a lab network")
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
	return a, nil
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

// run serves until ctx ends, then shuts the HTTP server down gracefully.
func (a *app) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, l := range a.servers {
		g.Go(func() error {
			var err error
			if l.tls {
				err = l.srv.ListenAndServeTLS("", "")
			} else {
				err = l.srv.ListenAndServe()
			}
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("%s %s: %w", l.key, l.srv.Addr, err)
		})
		g.Go(func() error {
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return l.srv.Shutdown(shut)
		})
	}
	g.Go(func() error {
		return a.service.Run(ctx, a.cfg.Reconcile.Interval.D(), func(ctx context.Context, devices []fleet.Device) {
			a.syncKea(ctx, devices)
		})
	})
	g.Go(func() error { return a.keaLoop(ctx) })
	g.Go(func() error { return a.probeLoop(ctx, 30*time.Second) })
	g.Go(func() error {
		return a.install.Watch(ctx, func(id int64, ws fleet.WorkflowStatus) {
			out, err := a.service.WorkflowChanged(ctx, id, ws)
			ev := a.log.Info()
			if err != nil {
				ev = a.log.Warn().Err(err)
			}
			ev.Str("trigger", "workflow-watch").EmbedObject(out).Msg("decision")
		})
	})
	return g.Wait()
}

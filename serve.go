package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/folly-infra/fleetd/cli"
	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workload"
)

const serveUsage = `usage: fleetd serve [--config FILE] [--listen-http HOST:PORT] [--listen-https HOST:PORT] [--debug-listen 127.0.0.1:PORT]

Runs the service until SIGINT or SIGTERM: the HTTP server, the periodic reconcile, the Workflow
watch and the Kea reservations (docs/operate.md).`

// serve runs the service until a signal arrives: the HTTP server, the periodic reconcile, the
// Workflow watch and the Kea reservations, each a task of one errgroup.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("serve", serveUsage)
	cfgPath := fs.String("config", "fleetd.yaml", "the config file")
	listenHTTP := fs.String("listen-http", "", "override listen.http (host:port)")
	listenHTTPS := fs.String("listen-https", "", "override listen.https (host:port; needs tls in the config)")
	debugListen := fs.String("debug-listen", "", "serve Go's runtime profiles (net/http/pprof) on this loopback host:port (docs/operate.md, \"Profiles\")")
	pos, code, ok := cli.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, pos, stderr); !ok {
		return code
	}
	if *debugListen != "" {
		if err := checkDebugListen(*debugListen); err != nil {
			fmt.Fprintln(stderr, "fleetd serve:", err)
			return 2
		}
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
	if *debugListen != "" {
		srv, addr, err := startDebug(*debugListen)
		if err != nil {
			log.Error().Err(err).Msg("fleetd cannot start")
			return 1
		}
		defer srv.Close()
		log.Warn().Str("debug_listen", addr.String()).Msg("serving Go's runtime profiles on the debug listener (--debug-listen)")
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

// run serves until ctx ends, then shuts the HTTP server down gracefully.
func (a *app) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	var nodes *workload.Nodes // the workload cluster's Nodes, for the join deadlines and the leaving devices' Nodes; nil without one
	if a.workload != nil {
		var err error
		if nodes, err = a.workload.WatchNodes(ctx, a.service.Membership, 5*time.Minute, func(out fleet.Outcome, err error) {
			if err != nil {
				a.log.Warn().Err(err).Str("trigger", "node-watch").EmbedObject(out).Msg("decision")
			} else if out.Result != "no-change" {
				a.log.Info().Str("trigger", "node-watch").EmbedObject(out).Msg("decision")
			}
		}); err != nil {
			return err
		}
	}
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
		return a.service.Requests.Run(ctx, a.cfg.Reconcile.Interval.D(), func(ctx context.Context, devices []fleet.Device) {
			var node func(string) (fleet.NodeReport, bool)
			if nodes != nil {
				node = nodes.Node
			}
			a.afterListing(ctx, devices, node)
		})
	})
	g.Go(func() error { return a.keaLoop(ctx) })
	g.Go(func() error {
		return a.service.Review.RunInventoryCheck(ctx, fleet.InventoryFirstCheck, fleet.InventoryInterval)
	})
	g.Go(func() error { return a.intake.Run(ctx) })
	if a.workload != nil {
		// The kubelets' CSRs (fleet.Membership); one not decided is offered again every 30 s.
		g.Go(func() error { return a.workload.WatchCSRs(ctx, a.service.Membership, 30*time.Second) })
	}
	g.Go(func() error { return a.probeLoop(ctx, 30*time.Second) })
	g.Go(func() error {
		return a.install.Watch(ctx, func(id int64, ws fleet.WorkflowStatus) {
			out, err := a.service.Requests.WorkflowChanged(ctx, id, ws)
			ev := a.log.Info()
			if err != nil {
				ev = a.log.Warn().Err(err)
			}
			ev.Str("trigger", "workflow-watch").EmbedObject(out).Msg("decision")
		})
	})
	return g.Wait()
}

// afterListing is what the periodic reconcile does with each pass's listing: the Kea
// reservations, then, with a workload cluster (node: its Node of a name, as the Node watch last
// saw it; nil without one), the join deadlines and the Nodes of the devices that left.
func (a *app) afterListing(ctx context.Context, devices []fleet.Device, node func(name string) (fleet.NodeReport, bool)) {
	a.syncKea(ctx, devices)
	if node == nil {
		return
	}
	for _, out := range a.service.Membership.JoinDeadlines(ctx, devices, node) {
		a.log.Info().Str("trigger", "join-deadline").EmbedObject(out).Msg("decision")
	}
	for _, out := range a.service.Requests.RemoveLeftNodes(ctx, devices, node) {
		ev := a.log.Info()
		if out.Result != "node-deleted" {
			ev = a.log.Warn()
		}
		ev.Str("trigger", "node-cleanup").EmbedObject(out).Msg("decision")
	}
}

package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
)

// pokeKea asks for a reservations refresh (an interface, MAC or address changed in NetBox); it
// never blocks: pokes coalesce.
func (a *app) pokeKea(context.Context) {
	select {
	case a.keaPoke <- struct{}{}:
	default:
	}
}

// keaLoop refreshes the reservations when poked, at most every few seconds.
func (a *app) keaLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.keaPoke:
		}
		devices, err := a.netbox.Devices(ctx)
		if err != nil {
			a.log.Warn().Err(err).Msg("kea: cannot list devices; the periodic reconcile retries")
		} else {
			a.syncKea(ctx, devices)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

func (a *app) syncKea(ctx context.Context, devices []fleet.Device) {
	if _, err := a.kea.Sync(ctx, devices); err != nil {
		a.log.Warn().Err(err).Msg("kea: reservations not synced")
	}
}

// newDependencyGauge is fleetd_dependency_up, which the alert rules watch.
func newDependencyGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleetd_dependency_up",
		Help: "1 when the dependency (netbox, kubernetes) answered fleetd's last probe, 0 when it did not.",
	}, []string{"dependency"})
	reg.MustRegister(g)
	return g
}

// probeLoop asks NetBox and the Kubernetes API every interval and records whether they answered.
func (a *app) probeLoop(ctx context.Context, every time.Duration) error {
	for {
		for _, dep := range a.deps {
			name := dep.Name
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := dep.Check(pctx)
			cancel()
			up := 1.0
			if err != nil {
				up = 0
				if ctx.Err() == nil {
					a.log.Warn().Err(err).Str("dependency", name).Msg("dependency unreachable")
				}
			}
			a.up.WithLabelValues(name).Set(up)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

package kea

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

// DefaultPath is where fleetd writes the reservations (docs/design.md §7).
const DefaultPath = "/var/lib/kea/fleet/reservations.json"

// DefaultTimeout bounds one exchange on Kea's control socket.
const DefaultTimeout = 10 * time.Second

// Config configures a Writer.
type Config struct {
	Path string // the reservations file; empty means DefaultPath
	// ControlSocket is Kea's unix control socket ("control-socket" → "socket-name" in
	// kea-dhcp4.conf). Empty means the file is written but Kea is not asked to reload.
	ControlSocket string
	// Subnet is the Kea subnet whose "reservations" include the file. When set, devices whose
	// address lies outside it are left out, because Kea would refuse the whole configuration.
	Subnet   netip.Prefix
	Timeout  time.Duration // control socket exchange; 0 means DefaultTimeout
	Logger   zerolog.Logger
	Registry prometheus.Registerer // nil means a private registry
}

// Writer keeps the reservations file in step with NetBox. Sync calls are serialized.
type Writer struct {
	cfg Config
	log zerolog.Logger

	reservations prometheus.Gauge
	writes       prometheus.Counter
	reloads      *prometheus.CounterVec

	mu sync.Mutex
	// reloaded is true once Kea accepted a reload of the current content. It starts false, so
	// the first Sync after a start reloads even if the file did not change (fleetd may have
	// stopped between writing the file and reloading Kea).
	reloaded bool
}

// Reload outcomes, the values of fleetd_kea_reloads_total's outcome label.
const (
	ReloadOK          = "ok"          // Kea answered result 0
	ReloadRefused     = "refused"     // Kea answered a non-zero result (it keeps its previous configuration)
	ReloadUnreachable = "unreachable" // the control socket could not be reached or answered garbage
)

// NewWriter checks the configuration and registers the metrics.
func NewWriter(cfg Config) (*Writer, error) {
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if !filepath.IsAbs(cfg.Path) {
		return nil, fmt.Errorf("new Kea writer: reservations path %q is not absolute (Kea's include needs the same absolute path)", cfg.Path)
	}
	if cfg.ControlSocket != "" && !filepath.IsAbs(cfg.ControlSocket) {
		return nil, fmt.Errorf("new Kea writer: control socket %q is not an absolute path", cfg.ControlSocket)
	}
	if cfg.Subnet.IsValid() && (!cfg.Subnet.Addr().Is4() || cfg.Subnet != cfg.Subnet.Masked()) {
		return nil, fmt.Errorf("new Kea writer: subnet %s is not an IPv4 network address with its prefix (e.g. 10.0.0.0/24)", cfg.Subnet)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	w := &Writer{cfg: cfg, log: cfg.Logger.With().Str("component", "kea").Logger(),
		reservations: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_kea_reservations",
			Help: "Host reservations in the Kea reservations file after the last sync.",
		}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_kea_writes_total",
			Help: "Times the Kea reservations file was replaced because a reservation changed (a sync that changes none writes nothing).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_kea_reloads_total",
			Help: "Kea config-reload commands by outcome (ok, refused, unreachable).",
		}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{w.reservations, w.writes, w.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("new Kea writer: register metrics: %w", err)
		}
	}
	for _, o := range []string{ReloadOK, ReloadRefused, ReloadUnreachable} { // at 0 from the start, so the first reload of each outcome is an increase
		w.reloads.WithLabelValues(o)
	}
	return w, nil
}

// Sync renders the reservations for devices, writes the file atomically when its content
// changed, and then asks Kea to reload. changed reports whether the file was written. An error
// after a write means the file is current but Kea may still serve the previous reservations; the
// next Sync retries the reload even if nothing changed.
func (w *Writer) Sync(ctx context.Context, devices []fleet.Device) (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res, skipped := Plan(devices, w.cfg.Subnet)
	w.logSkipped(skipped)
	body, err := Marshal(res)
	if err != nil {
		return false, fmt.Errorf("sync Kea reservations: %w", err)
	}
	old, err := os.ReadFile(w.cfg.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("sync Kea reservations: read %s: %w", w.cfg.Path, err)
	}
	changed = err != nil || !bytes.Equal(old, body)
	if changed {
		if err := writeAtomic(w.cfg.Path, body); err != nil {
			return false, fmt.Errorf("sync Kea reservations: %w", err)
		}
		w.reloaded = false
		w.writes.Inc()
		w.log.Info().Str("step", "write").Str("outcome", "changed").Int("reservations", len(res)).
			Str("path", w.cfg.Path).Msg("Kea reservations file updated")
	}
	w.reservations.Set(float64(len(res)))
	if w.reloaded || w.cfg.ControlSocket == "" {
		return changed, nil
	}
	if err := w.reload(ctx); err != nil {
		return changed, fmt.Errorf("sync Kea reservations: %w", err)
	}
	w.reloaded = true
	return changed, nil
}

// reload asks Kea to re-read its configuration file (which includes the reservations).
func (w *Writer) reload(ctx context.Context) error {
	_, err := command(ctx, w.cfg.ControlSocket, "config-reload", w.cfg.Timeout)
	switch {
	case err == nil:
		w.reloads.WithLabelValues(ReloadOK).Inc()
		w.log.Info().Str("step", "reload").Str("outcome", ReloadOK).Msg("Kea reloaded its configuration")
		return nil
	case errors.Is(err, ErrKeaRefused):
		w.reloads.WithLabelValues(ReloadRefused).Inc()
		return fmt.Errorf("reload Kea (it keeps its previous configuration; check kea-dhcp4.conf and %s): %w", w.cfg.Path, err)
	default:
		w.reloads.WithLabelValues(ReloadUnreachable).Inc()
		return fmt.Errorf("reload Kea: %w", err)
	}
}

// logSkipped logs devices left out: mistakes the owner should fix as warnings, devices that are
// simply not DHCP clients at debug level.
func (w *Writer) logSkipped(skipped []Skipped) {
	for _, s := range skipped {
		ev := w.log.Warn()
		if s.Reason.Ordinary() {
			ev = w.log.Debug()
		}
		ev.Str("device", s.Device).Str("step", "plan").Str("outcome", "skipped").Str("reason", string(s.Reason)).
			Msg("no Kea reservation: " + s.Detail)
	}
}

// writeAtomic replaces path with body: a temporary file in the same directory, fsync, rename,
// then fsync of the directory, so Kea reads either the old file or the new one, never a mix.
func writeAtomic(path string, body []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	if _, err := f.Write(body); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	// Kea runs as its own user and must be able to read the file.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s to fsync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

package fleet

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/pki"
)

// metrics are the domain's Prometheus metrics, registered on the registry main passes in.
type metrics struct {
	requests         *prometheus.CounterVec
	reconcileRuns    *prometheus.CounterVec
	reconcileSeconds prometheus.Histogram
	passSeconds      prometheus.Histogram
	conflicts        prometheus.Counter
	installErrors    prometheus.Counter
	journalErrors    prometheus.Counter
	pendingConfigs   prometheus.Gauge
	ownedWrites      *prometheus.CounterVec
	deliveries       *prometheus.CounterVec
	csrDecisions     *prometheus.CounterVec
	joins            *prometheus.CounterVec
	bootChecks       *bootCheckSamples
	enrollments      *prometheus.CounterVec
	bootCheckRuns    *prometheus.CounterVec
	renewals         *prometheus.CounterVec
	inventoryDiffs   *prometheus.GaugeVec
	inventoryRuns    *prometheus.CounterVec
	spireBans        *prometheus.CounterVec
	nodeCleanups     *prometheus.CounterVec
	seals            *sealMetrics
	receipts         *receiptMetrics
	nodeAccess       *nodeAccessMetrics
}

// newMetrics registers the domain's metrics on reg, and the per-device series on devices (nil:
// they are not exported; bootmetrics.go).
func newMetrics(reg, devices prometheus.Registerer, clock Clock) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_requests_total",
			Help: "Requests by action and result (accepted, rejected, succeeded, failed, and unconfirmed: a wipe or retirement whose Workflow succeeded with no verified receipt).",
		}, []string{"action", "result"}),
		reconcileRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_reconcile_runs_total",
			Help: "Periodic reconciles over all devices, by result (ok, error).",
		}, []string{"result"}),
		reconcileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetd_device_reconcile_seconds",
			Help:    "Time to reconcile one device (read, decide, write).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fleetd_reconcile_pass_seconds",
			Help: "Wall time of one periodic reconcile pass: the change log, the listing, the devices that need attention, and the listing's hooks (Kea reservations, join deadlines, left Nodes).",
			// 50 ms to 102 s: a pass over 10,000 devices takes seconds (docs/performance.md); one
			// that nears reconcile.interval delays the next.
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_netbox_conflicts_total",
			Help: "Conditional NetBox writes that found the device changed (412) and were redone.",
		}),
		installErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_install_errors_total",
			Help: "Workflow creations deferred because the Kubernetes API failed.",
		}),
		journalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_journal_errors_total",
			Help: "NetBox journal entries that could not be written.",
		}),
		pendingConfigs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_pending_configs",
			Help: "Provisions whose configuration waits for its one fetch, as NetBox had them at the last reconcile.",
		}),
		ownedWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_owned_field_writes_total",
			Help: "fleetd's writes of the fields it owns outside a decision, by outcome: restored (another user's write put back to fleetd's own), untrusted (nothing of fleetd's to put back: the device marked untrusted), sealed (values sealed at an upgrade or with a new key), error.",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_config_fetches_total",
			Help: "Configuration fetches by kind and outcome (delivered, or the refusal code).",
		}, []string{"kind", "outcome"}),
		csrDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_csr_decisions_total",
			Help: "Kubelet CSRs of the workload cluster decided by fleetd, by signer, decision (approved, denied, or error: not decided, offered again) and the decision's reason.",
		}, []string{"signer", "decision", "reason"}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_joins_total",
			Help: "Joining nodes' ends, by result: ready (the Node Ready through the certificate fleetd approved; the device active) or timed_out (not Ready within cluster.join_deadline; the request failed).",
		}, []string{"result"}),
		bootChecks: &bootCheckSamples{clock: clock},
		enrollments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_enrollments_total",
			Help: "Enrollment round trips by action, step (challenge, evidence) and outcome (ok or the refusing check).",
		}, []string{"action", "step", "outcome"}),
		bootCheckRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_boot_checks_total",
			Help: "Boot checks by outcome: ok, drift, failed (recorded on the device), or the refusal code (nothing recorded).",
		}, []string{"outcome"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_cert_renewals_total",
			Help: "Certificates a boot check found due or replaced, by profile (ldevid, lak) and result: renewed, redelivered (a replaced certificate answered with its renewal's again, nothing issued), or the code that kept it from being renewed (renewal_failed is fleetd's own failure to issue).",
		}, []string{"profile", "result"}),
		inventoryDiffs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetd_inventory_differences",
			Help: "Differences between NetBox's declarations and the machines' attested facts, by kind, as the last inventory check of the whole fleet found them (docs/design.md §10).",
		}, []string{"kind"}),
		inventoryRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_inventory_checks_total",
			Help: "Inventory checks of the whole fleet, by result (ok, error: it could not check).",
		}, []string{"result"}),
	}
	m.seals, m.receipts, m.nodeAccess, m.spireBans, m.nodeCleanups = newSealMetrics(), newReceiptMetrics(), newNodeAccessMetrics(), newSPIREBans(), newNodeCleanups()
	for _, c := range slices.Concat([]prometheus.Collector{m.inventoryDiffs, m.inventoryRuns, m.requests, m.reconcileRuns, m.reconcileSeconds, m.passSeconds,
		m.conflicts, m.installErrors, m.journalErrors, m.pendingConfigs, m.ownedWrites, m.deliveries, m.csrDecisions, m.joins, newFleetCollector(m.bootChecks),
		m.enrollments, m.bootCheckRuns, m.renewals, m.spireBans, m.nodeCleanups}, m.seals.collectors(), m.receipts.collectors(), m.nodeAccess.collectors()) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register fleet metrics: %w", err)
		}
	}
	if devices != nil {
		if err := devices.Register(newNodeCollector(m.bootChecks)); err != nil {
			return nil, fmt.Errorf("register the per-device metrics: %w", err)
		}
	}
	if err := m.startAtZero(); err != nil {
		return nil, fmt.Errorf("create fleet metrics at 0: %w", err)
	}
	return m, nil
}

// startAtZero creates every series of the labelled counters whose labels fleetd knows in
// advance, at 0: a series that first appears at 1, as after a restart, gives
// increase() nothing to see, so an alert on it would never fire for the first event. Open label
// sets (refusal codes) appear when they first happen. fleetd_inventory_differences is a gauge of
// what a check found: it has no series until this process's first check of the whole fleet, so
// that no 0 says a fleet agrees before it was checked.
func (m *metrics) startAtZero() error {
	okError := []string{"ok", "error"}
	return errors.Join(
		atZero(m.requests.MetricVec, labels(ActionProvision, ActionAttest, ActionWipe, ActionRetire), []string{"accepted", "rejected", "succeeded", "failed"}),
		atZero(m.requests.MetricVec, labels(ActionWipe, ActionRetire), labels(StateUnconfirmed)),
		m.receipts.atZero(),
		m.nodeAccess.atZero(),
		atZero(m.reconcileRuns.MetricVec, okError),
		atZero(m.inventoryRuns.MetricVec, okError),
		atZero(m.ownedWrites.MetricVec, []string{"restored", string(StateUntrusted), "sealed", "error"}),
		atZero(m.deliveries.MetricVec, labels(KindTalos, KindNixOS, KindAlpine, KindCloudInit), []string{"delivered"}),
		atZero(m.csrDecisions.MetricVec, []string{SignerKubeletClient, SignerKubeletServing}, []string{"approved"}, []string{"AttestedDevice"}),
		atZero(m.csrDecisions.MetricVec, []string{SignerKubeletClient, SignerKubeletServing}, []string{"error"}, []string{""}),
		atZero(m.joins.MetricVec, []string{"ready", "timed_out"}),
		atZero(m.bootCheckRuns.MetricVec, labels(BootCheckOK, BootCheckDrift, BootCheckFailed)),
		atZero(m.renewals.MetricVec, labels(pki.ProfileLDevID, pki.ProfileLAK), []string{"renewed", RenewRedelivered, RenewRefusedError}),
		atZero(m.spireBans.MetricVec, []string{SPIREBanned, SPIRENone, SPIREFailed}),
		atZero(m.nodeCleanups.MetricVec, []string{NodeCordon, NodeDelete}, []string{NodeCleaned, NodeUntouched, NodeFailed}),
	)
}

// atZero creates vec's series for every combination of the label values given, one list per
// label in the vec's label order.
func atZero(vec *prometheus.MetricVec, values ...[]string) error {
	var errs []error
	var walk func(prefix []string, rest [][]string)
	walk = func(prefix []string, rest [][]string) {
		if len(rest) == 0 {
			_, err := vec.GetMetricWithLabelValues(prefix...)
			errs = append(errs, err)
			return
		}
		for _, v := range rest[0] {
			walk(append(slices.Clip(prefix), v), rest[1:])
		}
	}
	walk(nil, values)
	return errors.Join(errs...)
}

// labels are typed label values as strings.
func labels[T ~string](vs ...T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// observeSeals records how a listing's devices are sealed (seal_metrics.go).
func (m *metrics) observeSeals(devices []Device, keys *SealKeys, brake bool) {
	m.seals.observe(devices, keys, brake)
}

// observePending counts the devices whose configuration is open for its fetch.
func (m *metrics) observePending(devices []Device, now time.Time) {
	n := 0
	for _, d := range devices {
		if delivery(d, now) == deliveryOpen {
			n++
		}
	}
	m.pendingConfigs.Set(float64(n))
}

package netbox

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the adapter's Prometheus metrics, registered on the injected registry.
type metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetd_netbox_requests_total",
			Help: "NetBox API requests by operation and final HTTP status (\"error\" when NetBox gave no answer), after retries."},
			[]string{"op", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetd_netbox_request_errors_total",
			Help: "NetBox API requests that failed (no answer, or an answer other than 2xx), by operation."},
			[]string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetd_netbox_request_duration_seconds",
			Help:    "Time of NetBox API requests including retries, by operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"op"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register NetBox client metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one request of op that started at start.
func (m *metrics) observe(op string, start time.Time, resp *http.Response, err error) {
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	code := "error"
	if resp != nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	m.requests.WithLabelValues(op, code).Inc()
	if resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		m.errors.WithLabelValues(op).Inc()
	}
}

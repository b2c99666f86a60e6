package handlers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/folly-infra/fleetd/api"
)

// deviceMetrics serves GET /metrics/devices: the per-device series, which name the fleet's
// machines and grow with it, to a caller with the metrics token only — a token of its own, so
// that Prometheus needs no operator rights (docs/operate.md, "Metrics and alerts"). Its wrong
// guesses count with the operator token's (Deps.OperatorGuesses).
func (s *Server) deviceMetrics() http.Handler {
	if s.deps.DeviceGatherer == nil || len(s.deps.MetricsToken) == 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusNotFound, api.Error{Code: "not_configured",
				Message: "fleetd serves the per-device metrics only with metrics.token_file set: set it, and scrape with Authorization: Bearer <that token> (docs/operate.md)"})
		})
	}
	h := promhttp.HandlerFor(s.deps.DeviceGatherer, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch ok, addr, wait := s.bearer(r, s.deps.MetricsToken); {
		case ok:
			h.ServeHTTP(w, r)
		case wait > 0:
			rateLimited(w, addr, wait)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="fleetd metrics"`)
			writeJSON(w, http.StatusUnauthorized, api.Error{Code: "unauthorized",
				Message: "the per-device metrics need Authorization: Bearer <the token in metrics.token_file>"})
		}
	})
}

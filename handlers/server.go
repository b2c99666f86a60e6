package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/webhook"
)

// Deps are what the handlers call.
type Deps struct {
	Service *fleet.Service
	// The domain's use cases the routes call, each the narrow type of its routes (fleet.Service
	// holds them all).
	Enrollment *fleet.Enrollment // the enrollment exchange: /v1/attest/...
	Delivery   *fleet.Delivery   // the configuration fetch: /v1/config/...
	BootChecks *fleet.BootChecks // the hourly boot check: /v1/boot-check...
	Requests   *fleet.Requests   // the operator's reconcile of one device
	Review     *fleet.Review     // the operator's plan and inventory check
	Views      *fleet.Views      // the operator's device views
	Webhooks   *webhook.Intake
	Ready      []ReadyCheck
	Gatherer   prometheus.Gatherer // the fleet-wide metrics, served at /metrics to anyone
	// DeviceGatherer holds the per-device series, served at /metrics/devices to a caller with
	// MetricsToken only (docs/operate.md, "Metrics and alerts"); both nil or empty: that route
	// answers 404 not_configured.
	DeviceGatherer prometheus.Gatherer
	MetricsToken   []byte
	OperatorToken  []byte
	Logger         zerolog.Logger
	// NeedTLS refuses the node-facing and operator routes on connections without TLS (set when
	// fleetd has a TLS listener: the configurations it serves hold cluster secrets, and the
	// operator's bearer token is a password). NetBox's webhooks, /healthz, /readyz and the
	// fleet-wide /metrics stay on the plain listener too (docs/operate.md, "Endpoints").
	NeedTLS bool
	// NodeLimits rate-limits node-facing routes per source address.
	NodeLimits Limits
	// OperatorGuesses bounds the wrong or missing operator tokens one source address may present
	// (operator routes, and /readyz's detail); zero takes 10 at once, then 10 a minute.
	OperatorGuesses Limits
	// Now is the clock (readiness results' age); default time.Now.
	Now func() time.Time
	// ReceiptTokens opens the receipt tokens the evidence answers hand out, and Receipts records
	// what a receipt proves (receipt.go); without both the receipt route answers 503
	// not_configured.
	ReceiptTokens *attest.ReceiptSealer
	Receipts      WipeReceipts
}

// Server is fleetd's HTTP handler.
type Server struct {
	deps    Deps
	limiter *addrLimiter
	guesses *addrLimiter
	ready   *readiness
	handler http.Handler
}

// missingUseCases names the domain's use cases deps lacks.
func missingUseCases(deps Deps) []string {
	var missing []string
	for _, u := range []struct {
		name string
		nil  bool
	}{{"Enrollment", deps.Enrollment == nil}, {"Delivery", deps.Delivery == nil}, {"BootChecks", deps.BootChecks == nil},
		{"Requests", deps.Requests == nil}, {"Review", deps.Review == nil}, {"Views", deps.Views == nil}} {
		if u.nil {
			missing = append(missing, u.name)
		}
	}
	return missing
}

// New builds the handler from the route table.
func New(deps Deps) (*Server, error) {
	if len(deps.OperatorToken) == 0 {
		return nil, errors.New("new handlers: no operator token (operator.token_file)")
	}
	if missing := missingUseCases(deps); len(missing) > 0 {
		return nil, fmt.Errorf("new handlers: no %s: wire every use case of the fleet.Service that fleet.NewService built", strings.Join(missing, ", "))
	}
	if deps.OperatorGuesses.PerMinute <= 0 {
		deps.OperatorGuesses = Limits{PerMinute: 10, Burst: 10}
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	s := &Server{deps: deps, limiter: newAddrLimiter(deps.NodeLimits), guesses: newAddrLimiter(deps.OperatorGuesses),
		ready: &readiness{checks: deps.Ready, now: deps.Now, log: deps.Logger}}
	byName := map[string]http.Handler{
		"webhook":           deps.Webhooks.Handler("inventory"),
		"webhook-provision": deps.Webhooks.Handler("provision"),
		"webhook-attest":    deps.Webhooks.Handler("attest"),
		"webhook-wipe":      deps.Webhooks.Handler("wipe"),
		"webhook-retire":    deps.Webhooks.Handler("retire"),
		"attest-challenge":  http.HandlerFunc(s.challenge),
		"attest-evidence":   http.HandlerFunc(s.evidence),
		"wipe-receipt":      http.HandlerFunc(s.wipeReceipt),
		"boot-check-nonce":  http.HandlerFunc(s.bootCheckNonce),
		"boot-check":        http.HandlerFunc(s.bootCheck),
		"config-talos":      s.config(fleet.KindTalos),
		"config-seed":       s.config(fleet.KindNixOS),
		"config-nocloud":    s.config(fleet.KindCloudInit),
		"devices":           s.operatorOnly(s.listDevices),
		"device":            s.operatorOnly(s.getDevice),
		"device-reconcile":  s.operatorOnly(s.reconcileDevice),
		"device-plan":       s.operatorOnly(s.planDevice),
		"inventory":         s.operatorOnly(s.inventory),
		"device-inventory":  s.operatorOnly(s.deviceInventory),
		"healthz":           http.HandlerFunc(s.healthz),
		"readyz":            http.HandlerFunc(s.readyz),
		"metrics":           promhttp.HandlerFor(deps.Gatherer, promhttp.HandlerOpts{}),
		"metrics-devices":   s.deviceMetrics(),
	}
	r, err := router(Table(), byName, func(rt Route, h http.Handler) http.Handler { return wrap(deps.Logger, rt, s.guard(rt, h)) })
	if err != nil {
		return nil, err
	}
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, api.Error{Code: "no_route", Message: "fleetd serves no such route; see docs/http.md"})
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req)
		w.Header().Set("Allow", strings.Join(allowed, ", ")) // RFC 9110 §15.5.6: a 405 names the methods
		writeJSON(w, http.StatusMethodNotAllowed, api.Error{Code: "method_not_allowed",
			Message: "the route " + req.URL.Path + " takes " + strings.Join(allowed, " or ") + ", not " + req.Method + "; see docs/http.md"})
	})
	s.handler = r
	return s, nil
}

// allowedMethods are the methods the route table serves at req's path, in the table's order.
func allowedMethods(r *mux.Router, req *http.Request) []string {
	var out []string
	for _, rt := range Table() {
		if slices.Contains(out, rt.Method) {
			continue
		}
		probe := req.Clone(req.Context())
		probe.Method = rt.Method
		var m mux.RouteMatch
		if r.Match(probe, &m) && m.MatchErr == nil {
			out = append(out, rt.Method)
		}
	}
	return out
}

// ServeHTTP gives every response an X-Request-Id (docs/design.md §6), unknown routes included, and routes
// the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Request-Id", newRequestID())
	s.handler.ServeHTTP(w, r)
}

// log is the server's logger with the request id of the response being written.
func (s *Server) log(w http.ResponseWriter) zerolog.Logger {
	return s.deps.Logger.With().Str("request_id", w.Header().Get("X-Request-Id")).Logger()
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers whether every dependency answered a probe at most readyMaxAge old (readiness)
// and names the ones that failed. Their errors (NetBox's URL, the API server's answer) are told
// only to a caller with the operator token, over TLS when fleetd has it, and logged; anyone else
// learns which dependency failed, not how.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	withToken := r.Header.Get("Authorization") != ""
	if withToken && s.deps.NeedTLS && r.TLS == nil {
		tlsRequired(w, "the operator token is taken only over HTTPS, where it does not cross the network in clear: ask /readyz without it here, or with it at fleetd's https URL (public_url)")
		return
	}
	failed, err := s.ready.result(r.Context())
	if err != nil {
		return // the caller went away
	}
	if len(failed) == 0 {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	var names []string
	for _, c := range s.deps.Ready {
		if _, ok := failed[c.Name]; ok {
			names = append(names, c.Name)
		}
	}
	body := map[string]any{"status": "not ready", "failed": names}
	if withToken {
		if ok, addr, wait := s.operator(r); ok {
			body["errors"] = failed
		} else if wait > 0 {
			rateLimited(w, addr, wait)
			return
		}
	}
	writeJSON(w, http.StatusServiceUnavailable, body)
}

package handlers

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/api"
)

// NodeFacing reports whether machines call the route (enrollment, wipe receipts, configuration, boot checks):
// those are the routes served only over TLS when TLS is configured, and rate-limited per source
// address.
func (r Route) NodeFacing() bool {
	for _, p := range []string{"/v1/attest/", "/v1/wipe/", "/v1/config/", "/v1/boot-check"} {
		if strings.HasPrefix(r.Path, p) {
			return true
		}
	}
	return false
}

// rateLimited answers 429 with the seconds to wait.
func rateLimited(w http.ResponseWriter, addr netip.Addr, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
	writeJSON(w, http.StatusTooManyRequests, api.Error{Code: "rate_limited",
		Message: "too many requests from " + sourceName(addr) + "; retry after the Retry-After seconds"})
}

// sourceName is how an answer names the source a limit applies to: the IPv4 address, or the
// IPv6 /64.
func sourceName(addr netip.Addr) string {
	if src := source(addr); !src.Addr().Is4() {
		return src.String()
	}
	return addr.Unmap().String()
}

// TokenFacing reports whether the route takes a bearer token, the operator's or the metrics
// token: those are served only over TLS when TLS is configured (a token is a password).
func (r Route) TokenFacing() bool { return r.Auth == authBearer || r.Auth == authMetrics }

// The Auth of the routes that take a bearer token.
const (
	authBearer  = "bearer token"
	authMetrics = "metrics token"
)

// tlsRequired answers a request that arrived over plain HTTP on a route served only over TLS.
func tlsRequired(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusForbidden, api.Error{Code: "tls_required", Message: msg})
}

// guard refuses a node-facing or token-bearing request that arrives over plain HTTP when TLS is
// configured, and a node-facing one over its address's rate; it passes everything else on.
func (s *Server) guard(rt Route, h http.Handler) http.Handler {
	if rt.TokenFacing() {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.deps.NeedTLS && r.TLS == nil {
				tlsRequired(w, "routes that take a bearer token (the operator's, the metrics token) are served only over HTTPS, where the token does not cross the network in clear; use fleetd's https URL (public_url)")
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	if !rt.NodeFacing() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.deps.NeedTLS && r.TLS == nil {
			tlsRequired(w, "node routes are served only over HTTPS; use fleetd's https URL (public_url)")
			return
		}
		if s.limiter != nil {
			addr, err := peerAddr(r.RemoteAddr)
			if err == nil {
				if ok, wait := s.limiter.allow(addr, time.Now()); !ok {
					rateLimited(w, addr, wait)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

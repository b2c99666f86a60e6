package handlers

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// The cluster's authorization webhook (docs/http.md, "The cluster's authorization webhook"): the
// workload cluster's API server posts a SubjectAccessReview for every request of a user in the
// group system:nodes (its authorization configuration's matchConditions) and fleetd answers with
// the same object: denied with a reason, or no opinion. It is served on a TLS listener of its
// own (cluster.authorization.listen) that takes only clients with a certificate of the
// configured CA (AuthorizationTLS); the route refuses any request that did not present one.

// PathAuthorize is the webhook's path: the URL in the API server's webhook kubeconfig ends with it.
const PathAuthorize = "/v1/cluster/authorize"

// maxAuthorizeBody bounds a SubjectAccessReview: a user, its groups and extra, and one request's
// attributes come to a few hundred bytes; 64 KiB leaves room for large extra values.
const maxAuthorizeBody = 64 * kib

// ClusterTable is the route of the authorization webhook's listener, in docs/http.md's order.
func ClusterTable() []Route {
	return []Route{
		{"authorize", "POST", PathAuthorize, "the workload cluster's kube-apiserver", "client certificate of cluster.authorization.client_ca (mutual TLS)",
			"SubjectAccessReview authorization.k8s.io/v1 about a request of a system:nodes user: denied with a reason, or no opinion (never allowed)", maxAuthorizeBody},
	}
}

// NodeAccess decides the webhook's answers (fleet.NodeAccess).
type NodeAccess interface {
	Decide(fleet.NodeRequest) fleet.NodeDecision
}

// AuthorizationDeps are what the webhook's handler calls.
type AuthorizationDeps struct {
	Access NodeAccess
	Logger zerolog.Logger
}

// AuthorizationTLS is the webhook listener's TLS: its certificate, and a client certificate of
// clientCAs required of every client (the API server's), TLS 1.2 or later.
func AuthorizationTLS(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clientCAs,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// NewAuthorization is the webhook listener's handler: the route of ClusterTable, nothing else.
func NewAuthorization(d AuthorizationDeps) (http.Handler, error) {
	if d.Access == nil {
		return nil, errors.New("authorization webhook: no decision (AuthorizationDeps.Access)")
	}
	a := &authorizer{access: d.Access, log: d.Logger,
		// A kubelet asks every few seconds and the API server caches an answer for at most
		// unauthorizedTTL: lines of no opinion are sampled, denials never.
		quiet: d.Logger.Sample(&zerolog.BurstSampler{Burst: 20, Period: time.Second})}
	r, err := router(ClusterTable(), map[string]http.Handler{"authorize": http.HandlerFunc(a.authorize)},
		func(rt Route, h http.Handler) http.Handler { return wrap(d.Logger, rt, h) })
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Request-Id", newRequestID())
		r.ServeHTTP(w, req)
	}), nil
}

type authorizer struct {
	access NodeAccess
	log    zerolog.Logger
	quiet  zerolog.Logger
}

// authorize answers one SubjectAccessReview. A request fleetd cannot read is answered 400 or 413
// (the API server then applies the failure policy, no opinion; a 5xx it would retry); the body is read
// leniently, since a newer API server may send attributes this fleetd does not know.
func (a *authorizer) authorize(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		a.log.Warn().Str("remote", r.RemoteAddr).Str("outcome", "refused").Msg("authorization webhook: a request without a verified client certificate")
		writeJSON(w, http.StatusForbidden, map[string]string{"code": "client_certificate_required",
			"message": "the authorization webhook answers only the API server's client certificate (cluster.authorization.client_ca)"})
		return
	}
	var sar api.SubjectAccessReview
	if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			a.refuse(w, r, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is larger than %d bytes", tooBig.Limit))
			return
		}
		a.refuse(w, r, http.StatusBadRequest, "malformed", fmt.Sprintf("the body is not a SubjectAccessReview in JSON: %v", err))
		return
	}
	if sar.APIVersion != api.SubjectAccessReviewAPIVersion || sar.Kind != api.SubjectAccessReviewKind {
		a.refuse(w, r, http.StatusBadRequest, "malformed", fmt.Sprintf("the body is %s %s, not %s %s: set subjectAccessReviewVersion: v1 in the authorization configuration",
			quoted(sar.APIVersion), quoted(sar.Kind), api.SubjectAccessReviewAPIVersion, api.SubjectAccessReviewKind))
		return
	}
	req := fleet.NodeRequest{User: sar.Spec.User, Groups: sar.Spec.Groups}
	if ra := sar.Spec.ResourceAttributes; ra != nil {
		req.Verb, req.Resource, req.Subresource, req.Namespace, req.Name = ra.Verb, ra.Resource, ra.Subresource, ra.Namespace, ra.Name
	} else if na := sar.Spec.NonResourceAttributes; na != nil {
		req.Verb, req.Path = na.Verb, na.Path
	}
	d := a.access.Decide(req)
	answer := api.SubjectAccessReview{APIVersion: api.SubjectAccessReviewAPIVersion, Kind: api.SubjectAccessReviewKind}
	if d.Deny {
		answer.Status = api.SubjectAccessReviewStatus{Allowed: false, Denied: true, Reason: "fleetd: " + d.Refusal.Reason}
	}
	a.decisionLine(d, req).Str("request_id", w.Header().Get("X-Request-Id")).Msg("decision")
	writeJSON(w, http.StatusOK, answer)
}

// decisionLine is the request's decision line: a denial, and a denial the brake withheld, always;
// the rest sampled.
func (a *authorizer) decisionLine(d fleet.NodeDecision, req fleet.NodeRequest) *zerolog.Event {
	var ev *zerolog.Event
	switch d.Result {
	case fleet.NodeDenied:
		ev = a.log.Info()
	case fleet.NodeBraked:
		ev = a.log.Warn()
	default:
		ev = a.quiet.Info()
	}
	ev = ev.Str("route", "authorize").Str("user", capText(req.User, 128)).Str("node", d.Node).Strs("devices", d.Devices).
		Str("outcome", d.Result).Str("verb", req.Verb).Str("resource", req.Resource)
	if req.Subresource != "" {
		ev = ev.Str("subresource", req.Subresource)
	}
	if req.Name != "" {
		ev = ev.Str("name", capText(req.Name, 253))
	}
	if req.Path != "" {
		ev = ev.Str("path", capText(req.Path, 256))
	}
	if d.Refusal.Code != "" {
		ev = ev.Str("check", d.Refusal.Code).Str("detail", d.Refusal.Reason)
	}
	return ev
}

// refuse answers a request fleetd cannot read; the API server applies its failure policy.
func (a *authorizer) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	a.log.Warn().Str("route", "authorize").Str("request_id", w.Header().Get("X-Request-Id")).Str("remote", r.RemoteAddr).Str("outcome", code).Str("detail", msg).Msg("decision")
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func quoted(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// capText cuts s to n bytes for a log line.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Package handlers is fleetd's HTTP surface for nodes, agents and operators: one route table (the
// HTTP contract of docs/design.md §6, documented in docs/http.md and kept in agreement by a test) and thin
// handlers that decode, call the fleet service, and encode.
package handlers

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/gorilla/mux"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/webhook"
)

// Route is one line of the HTTP contract.
type Route struct {
	Name    string // key of the handler that serves it
	Method  string
	Path    string
	Caller  string // who calls it
	Auth    string // how the caller is checked
	Purpose string
	MaxBody int64 // request body limit in bytes (0: the route takes no body)
}

const (
	kib = 1 << 10
)

// WebhookPathProblems compares the webhook paths of a netbox-webhooks.yaml with the webhook
// routes fleetd serves: every path NetBox is told to call must be a POST route fleetd serves
// (else every delivery gets a 404), and every webhook route fleetd serves must be called by
// some webhook (else that request never arrives). It returns one sentence per disagreement.
func WebhookPathProblems(paths []string) []string {
	served := map[string]bool{}
	for _, r := range Table() {
		if r.Method == "POST" && r.Caller == "NetBox" {
			served[r.Path] = true
		}
	}
	var problems []string
	called := map[string]bool{}
	for _, p := range paths {
		called[p] = true
		if !served[p] {
			problems = append(problems, fmt.Sprintf("a webhook calls %s, which fleetd does not serve as POST: NetBox's deliveries would get 404", p))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(served)) {
		if !called[p] {
			problems = append(problems, fmt.Sprintf("no webhook calls %s: add the webhook for it from fleetd's netbox-webhooks.yaml", p))
		}
	}
	return problems
}

// Table is the HTTP contract: every route fleetd serves, in the order docs/http.md lists them.
func Table() []Route {
	return []Route{
		{"webhook", "POST", "/v1/netbox/webhook", "NetBox", "X-Hook-Signature", "inventory changed (interfaces, MACs, addresses, device create/delete): re-read the device, refresh Kea reservations", webhook.MaxBody},
		{"webhook-provision", "POST", "/v1/netbox/webhook/provision", "NetBox", "X-Hook-Signature", "desired_action=provision was set: re-read the device and take the request", webhook.MaxBody},
		{"webhook-attest", "POST", "/v1/netbox/webhook/attest", "NetBox", "X-Hook-Signature", "desired_action=attest was set: re-read the device and take the request", webhook.MaxBody},
		{"webhook-wipe", "POST", "/v1/netbox/webhook/wipe", "NetBox", "X-Hook-Signature", "desired_action=wipe was set: re-read the device and take the request", webhook.MaxBody},
		{"webhook-retire", "POST", "/v1/netbox/webhook/retire", "NetBox", "X-Hook-Signature", "status decommissioning was set: re-read the device and retire it", webhook.MaxBody},
		{"attest-challenge", "POST", api.PathAttestChallenge, "HookOS agent", "TPM (EK approval, credential activation)", "enrollment round trip 1: approve the EK, challenge the AK, hand out a nonce and a sealed token", api.MaxChallengeBody},
		{"attest-evidence", "POST", api.PathAttestEvidence, "HookOS agent", "sealed token + TPM evidence", "enrollment round trip 2: verify the evidence, for a provision issue LDevID and LAK, authorize the declared disk", api.MaxEvidenceBody},
		{"wipe-receipt", "POST", api.PathWipeReceipt, "HookOS agent", "sealed receipt token + quote by the attested AK", "after a wipe's or a retirement's erase: verify the TPM's quote over the wipe program's report, then record the device wiped or retired", api.MaxReceiptBody},
		{"boot-check-nonce", "POST", api.PathBootCheckNonce, "running node", "none", "boot check round trip 1: a fresh nonce and the sealed token that vouches for it", 0},
		{"boot-check", "POST", api.PathBootCheck, "running node", "LAK certificate + quote signature", "boot check round trip 2: verify the quote and event log, compare with the baseline, record the outcome in NetBox", api.MaxBootCheckBody},
		{"config-talos", "GET", "/v1/config/talos", "Talos node", "attested SMBIOS UUID + NetBox address + fetch secret", "the Talos machine config, once (?uuid=${uuid}&serial=${serial}&code=${code})", 0},
		{"config-seed", "GET", "/v1/config/seed", "NixOS / Alpine node", "attested SMBIOS UUID + NetBox address + fetch secret", "the seed JSON, once (?uuid=; Fleetd-Fetch-Secret header)", 0},
		{"config-nocloud", "GET", "/v1/config/nocloud.tar", "Workflow action in HookOS", "attested SMBIOS UUID + NetBox address + fetch secret", "the NoCloud seed tar, once (?uuid=; Fleetd-Fetch-Secret header)", 0},
		{"devices", "GET", "/v1/devices", "operator", authBearer, "every device: declaration, state, request, Workflow, certificates, boot check, pending configuration", 0},
		{"device", "GET", "/v1/devices/{name}", "operator", authBearer, "one device, with its Workflow's current action", 0},
		{"device-reconcile", "POST", "/v1/devices/{name}/reconcile", "operator", authBearer, "re-read one device from NetBox now and take the next step", 0},
		{"device-plan", "GET", "/v1/devices/{name}/plan", "operator", authBearer, "what the device's request, or ?action=, would do, writing nothing", 0},
		{"device-inventory", "GET", "/v1/devices/{name}/inventory", "operator", authBearer, "the device's NetBox declaration against its last attested facts, writing nothing", 0},
		{"inventory", "GET", "/v1/inventory", "operator", authBearer, "every fleet device's (or each ?device=) declaration against its last attested facts, writing nothing", 0},
		{"healthz", "GET", "/healthz", "systemd", "none", "liveness: the process serves HTTP", 0},
		{"readyz", "GET", "/readyz", "systemd, load balancer", "none", "readiness: NetBox and the Kubernetes API answer", 0},
		{"metrics", "GET", "/metrics", "Prometheus", "none", "fleet-wide metrics: counts by class, state and outcome, no device named", 0},
		{"metrics-devices", "GET", "/metrics/devices", "Prometheus", "metrics token", "the per-device series (boot checks, certificates), each named by its device", 0},
	}
}

// router builds the gorilla/mux router from the table and the handlers by name. A route without a
// handler is a wiring bug and fails at start, not at the first request.
func router(routes []Route, byName map[string]http.Handler, mw func(Route, http.Handler) http.Handler) (*mux.Router, error) {
	r := mux.NewRouter()
	for _, rt := range routes {
		h, ok := byName[rt.Name]
		if !ok {
			return nil, fmt.Errorf("route %s %s: no handler %q", rt.Method, rt.Path, rt.Name)
		}
		r.Handle(rt.Path, mw(rt, h)).Methods(rt.Method)
	}
	return r, nil
}

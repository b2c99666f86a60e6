package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// ConfigFetch is one node's request for its configuration (docs/design.md §6 GET /v1/config/...).
// Every value is a claim: the UUID and the secret are whatever the request says, the address is
// the connection's source. The address finds the device (its NetBox primary IPv4); the UUID must
// hash to the one its attestation recorded (IdentityMaterial.UUIDSHA256), and, when the
// attestation handed out a fetch secret, the secret to its hash (FetchSecretSHA256). The UUID and
// the address are no secrets — a UUID is broadcast at every PXE boot and an address can be taken
// over while the machine reboots —; the fetch secret is, and only the attested exchange gave it
// out (docs/security.md). A claim that fails consumes nothing. The UUID is never written into
// NetBox, a journal entry or an answer.
type ConfigFetch struct {
	Kind          Kind
	ClaimedUUID   string
	ClaimedSerial string // Talos sends ${serial}; logged, not checked (SMBIOS serials are often blank)
	ClaimedSecret string // the fetch secret the attestation handed out (Fleetd-Fetch-Secret, or Talos's code=), "" when none is sent
	RemoteAddr    netip.Addr
}

// Delivery is configuration delivery: a node's one fetch of its configuration, found by the
// fetch's address (addrindex.go), rendered from NetBox's fields and recorded delivered.
type Delivery struct {
	core     *core
	catalog  Catalog
	renderer Renderer
	addrs    *addrIndex // where a configuration fetch finds its device (addrindex.go)
}

// FetchConfig serves a node's one configuration fetch (docs/design.md §1 step 6, §9): it reads the
// device at the fetch's address, renders its configuration from NetBox's fields (the
// declaration, and the identity material its attestation recorded) and spore's files (classes,
// cluster secrets), and records the delivery — state and status active — in one conditional write
// that exactly one fetch wins, whichever fleetd instance serves it. The configuration is answered
// only once that write is in NetBox: a fetch that cannot record its delivery gets a 5xx and the
// node asks again. Every other answer is a refusal the handlers turn into 4xx; a fetch for a
// configuration that expired, or that an older fleetd lost, also ends the request.
func (s *Delivery) FetchConfig(ctx context.Context, f ConfigFetch) (NodeConfig, Outcome, error) {
	out := Outcome{Step: "deliver", Result: "refused", Detail: "from " + f.RemoteAddr.String()}
	if strings.TrimSpace(f.ClaimedUUID) == "" {
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedInvalid, "missing_uuid",
			"the query has no uuid: fetch with ?uuid=<SMBIOS system UUID>"))
	}
	d, err := s.deviceAt(ctx, f.RemoteAddr)
	if errors.Is(err, ErrNotFound) {
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedNotFound, "unknown_address",
			"no NetBox device has the address %s as its primary IPv4, so no configuration is served to it", f.RemoteAddr))
	}
	if r, ok := AsRefusal(err); ok {
		return NodeConfig{}, out, s.fetchRefused(f, r)
	}
	if err != nil {
		return NodeConfig{}, out, fmt.Errorf("look up the device at %s: %w", f.RemoteAddr, netboxErr(err))
	}
	unlock := s.core.locks.lock(d.ID) // an optimization: the conditional write below is what decides
	defer unlock()
	fd := &fetchDecision{s: s, f: f, now: s.core.clock.Now()}
	// Decided on fleetd's own values (docs/design.md §9): a copy of an older, delivered request
	// that another user saved back would answer config_delivered to a node whose configuration
	// waits; the read's trust check puts fleetd's values back first.
	delivered, wrote, err := s.core.updateOnOwnFields(ctx, d, fd.decide)
	out = outcomeFor(delivered, RequestAction(delivered.Owned.Request), "deliver", "refused")
	out.Detail = "from " + f.RemoteAddr.String()
	if r, ok := AsRefusal(err); ok {
		return NodeConfig{}, out, s.fetchRefused(f, r)
	}
	switch {
	case err != nil:
		return NodeConfig{}, out, fmt.Errorf("deliver the configuration of %s: %w", d.Name, netboxErr(err))
	case !wrote:
		return NodeConfig{}, out, s.refuseFetch(ctx, delivered, f, fd.refusal, fd.now)
	}
	if delivered.Owned.State != StateJoining { // a joining node's request succeeds when its Node is Ready
		s.core.metrics.requests.WithLabelValues(string(ActionProvision), "succeeded").Inc()
	}
	s.core.metrics.deliveries.WithLabelValues(string(f.Kind), "delivered").Inc()
	s.core.journal(ctx, delivered, JournalSuccess, fd.msg)
	out.Result = "delivered"
	return fd.cfg, out, nil
}

// fetchDecision decides a fetch on one read of the device (UpdateIfMatch's Decide) and keeps what
// it decided last: the configuration and the delivery's journal message, or the refusal.
type fetchDecision struct {
	s   *Delivery
	f   ConfigFetch
	now time.Time

	cfg     NodeConfig
	refusal *Refusal
	msg     string
}

func (fd *fetchDecision) decide(d Device) (Patch, bool, error) {
	fd.cfg, fd.refusal, fd.msg = NodeConfig{}, nil, ""
	class, ok := fd.s.catalog.Class(d.Declared.Class)
	if !ok {
		fd.refusal = Refuse(RefusedConflict, "class_unknown", "%s's class %q is no longer in classes.json", d.Name, d.Declared.Class)
		return Patch{}, false, nil
	}
	if fd.refusal = fetchRefusal(d, class, fd.f, fd.now); fd.refusal != nil {
		return Patch{}, false, nil
	}
	ev := EventDelivered
	if class.JoinsKubernetes {
		ev = EventDeliveredJoining
	}
	t, ok := Next(d.Owned.State, ActionProvision, ev)
	if !ok {
		return Patch{}, false, fmt.Errorf("deliver to %s: no transition from %q", d.Name, d.Owned.State)
	}
	node := NodeIdentity{UUID: strings.TrimSpace(fd.f.ClaimedUUID), Serial: d.Owned.Identity.SMBIOSSerial, Files: d.Owned.Identity.NodeFiles()}
	var err error
	if class.Kind == KindTalos {
		if node.BootstrapToken, err = fd.s.nodeToken(d); err != nil {
			fd.refusal = &Refusal{Class: RefusedConflict, Code: "config_rejected", Err: fmt.Errorf("%w: %s", ErrConfigRejected, err),
				Msg: fmt.Sprintf("the configuration of %s cannot carry its bootstrap token: %s", d.Name, err)}
			return Patch{}, false, nil
		}
	}
	if fd.cfg, err = fd.s.renderer.Render(d, class, node); err != nil {
		if errors.Is(err, ErrConfigRejected) {
			fd.refusal = &Refusal{Class: RefusedConflict, Code: "config_rejected", Err: err,
				Msg: fmt.Sprintf("the configuration of %s would now be rejected by its OS (its declaration or class changed since it attested); provision it again", d.Name)}
			return Patch{}, false, nil
		}
		return Patch{}, false, fmt.Errorf("render the configuration of %s: %w", d.Name, err)
	}
	fd.msg = fmt.Sprintf("Delivered %s to %s at %s for request %s%s.", fd.cfg.Summary, d.Name, fd.f.RemoteAddr, d.Owned.Request, boundBy(d.Owned.Identity))
	p := transitionPatch(d, t, fd.msg)
	if t.To == StateJoining {
		fd.msg += fmt.Sprintf(" It joins the cluster: the request is done when Node %s is Ready.", d.Name)
		p = transitionPatch(d, t, fd.msg)
		id := d.Owned.Identity
		id.Delivered = fd.now.UTC()
		p.Identity = &id
	}
	return p, true, nil
}

// nodeToken is the bootstrap token d's attestation derived for its request (bootstraptoken.go).
func (s *Delivery) nodeToken(d Device) (BootstrapToken, error) {
	key := d.Owned.Identity.BootstrapTokenKey
	if key == "" {
		return BootstrapToken{}, fmt.Errorf("request %s was attested by a fleetd that derived no bootstrap token for it; provision it again", d.Owned.Request)
	}
	return s.core.bootstrapToken(d, key)
}

// refuseFetch answers a fetch the device's fields do not open. A configuration that can no longer
// be delivered (expired, lost by an older fleetd, rejected by its OS now) also ends its request.
func (s *Delivery) refuseFetch(ctx context.Context, d Device, f ConfigFetch, r *Refusal, now time.Time) error {
	ev, msg, ends := endsRequest(d, now)
	if !ends && r.Code == "config_rejected" {
		ev, msg, ends = EventConfigLost, fmt.Sprintf("provision request %s failed: %s.", d.Owned.Request, r.Err), true
	}
	if ends {
		if _, err := s.core.apply(ctx, d, ActionProvision, ev, msg); err != nil {
			s.core.log.Warn().Err(err).Str("device", d.Name).Msg("ending the request failed; the reconcile retries")
		}
	}
	return s.fetchRefused(f, r)
}

func (s *Delivery) fetchRefused(f ConfigFetch, r *Refusal) error {
	s.core.metrics.deliveries.WithLabelValues(string(f.Kind), r.Code).Inc()
	return r
}

// boundBy is what the delivery journal says bound the fetch: never the UUID itself.
func boundBy(m IdentityMaterial) string {
	if m.FetchSecretSHA256 != "" {
		return ", bound by the attested SMBIOS UUID and the one-time fetch secret"
	}
	return ", bound by the attested SMBIOS UUID"
}

func stateWord(st State) string {
	if st == StateNone {
		return "empty"
	}
	return string(st)
}

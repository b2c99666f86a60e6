package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ConfigFetch is one node's request for its configuration (docs/design.md §6 GET /v1/config/...). Both
// values are claims: the UUID is whatever the query says, the address is the connection's
// source. They are checked against the attested UUID and the NetBox address.
type ConfigFetch struct {
	Kind          Kind
	ClaimedUUID   string
	ClaimedSerial string // Talos sends ${serial}; logged, not checked (SMBIOS serials are often blank)
	RemoteAddr    netip.Addr
}

// FetchConfig serves a node's one configuration fetch and records the delivery in NetBox: state
// and status active, a journal entry saying what was delivered to whom (docs/design.md §1 step 6). Every
// other answer is a refusal the handlers turn into 4xx; a fetch for a configuration lost in a
// restart also ends the request (journal entry, metric) and gets its own 410.
func (s *Service) FetchConfig(ctx context.Context, f ConfigFetch) (NodeConfig, Outcome, error) {
	out := Outcome{Step: "deliver", Result: "refused", Detail: "from " + f.RemoteAddr.String()}
	if f.ClaimedUUID == "" {
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedInvalid, "missing_uuid",
			"the query has no uuid: fetch with ?uuid=<SMBIOS system UUID>"))
	}
	id, ok := s.pending.byAddress(f.RemoteAddr)
	if !ok {
		if e, ok := s.pending.byUUID(f.ClaimedUUID); ok {
			out.Device = e.Device
			return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedForbidden, "wrong_address",
				"the configuration for this UUID is served only to its device's NetBox address, not to %s", f.RemoteAddr))
		}
		return s.fetchNothingPending(ctx, f)
	}
	unlock := s.locks.lock(id)
	defer unlock()
	if info, ok := s.pending.Peek(id); ok && info.Kind.Route() != f.Kind.Route() {
		out.DeviceID, out.Device = id, info.Device
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedNotFound, "wrong_kind",
			"the configuration pending for %s is a %s configuration: fetch it from /v1/config/%s", info.Device, info.Kind, info.Kind.Route()))
	}
	cfg, err := s.pending.Take(id, f.ClaimedUUID, f.RemoteAddr)
	switch {
	case errors.Is(err, ErrPendingWrongUUID):
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedForbidden, "wrong_uuid",
			"the uuid in the query is not the SMBIOS UUID the machine at %s attested with", f.RemoteAddr))
	case errors.Is(err, ErrPendingExpired):
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedGone, "config_expired",
			"the configuration expired before it was fetched; provision the device again"))
	case err != nil: // delivered meanwhile, or gone: answer as if nothing were pending
		d, err := s.inv.Device(ctx, id)
		if err != nil {
			return NodeConfig{}, out, fmt.Errorf("read device %d: %w: %w", id, ErrInventory, err)
		}
		return s.answerNothingPending(ctx, f, d) // under the lock taken above
	}
	d, err := s.inv.Device(ctx, id)
	if err != nil {
		// Delivered; NetBox is written by the next reconcile (followPending sees it delivered).
		s.metrics.deliveries.WithLabelValues(string(f.Kind), "delivered").Inc()
		out.DeviceID, out.Result = id, "delivered-unrecorded"
		return cfg, out, nil
	}
	msg := fmt.Sprintf("Delivered %s to %s at %s (SMBIOS UUID %s).", cfg.Summary, d.Name, f.RemoteAddr, f.ClaimedUUID)
	out, err = s.apply(ctx, d, RequestAction(d.Owned.Request), EventDelivered, msg)
	out.Step, out.Result = "deliver", "delivered"
	if err != nil {
		s.log.Warn().Err(err).Str("device", d.Name).Msg("configuration delivered; NetBox will be updated by the next reconcile")
	}
	s.metrics.deliveries.WithLabelValues(string(f.Kind), "delivered").Inc()
	return cfg, out, nil
}

// fetchNothingPending answers a fetch for which nothing is pending in this process. NetBox says
// why: the device at that address was already configured (410), its configuration was lost in a
// restart (a distinct 410 that ends the request and says to provision again), or there is no
// such device or request (404).
func (s *Service) fetchNothingPending(ctx context.Context, f ConfigFetch) (NodeConfig, Outcome, error) {
	out := Outcome{Step: "deliver", Result: "refused", Detail: "from " + f.RemoteAddr.String()}
	devices, err := s.inv.Devices(ctx)
	if err != nil {
		return NodeConfig{}, out, fmt.Errorf("look up the device at %s: %w: %w", f.RemoteAddr, ErrInventory, err)
	}
	var d Device
	for _, c := range devices {
		if c.IP() == f.RemoteAddr.Unmap() {
			d = c
			break
		}
	}
	if d.ID == 0 {
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedNotFound, "unknown_address",
			"no NetBox device has the address %s, so no configuration is served to it", f.RemoteAddr))
	}
	unlock := s.locks.lock(d.ID)
	defer unlock()
	name := d.Name
	if d, err = s.inv.Device(ctx, d.ID); err != nil {
		return NodeConfig{}, out, fmt.Errorf("read device %s: %w: %w", name, ErrInventory, err)
	}
	return s.answerNothingPending(ctx, f, d)
}

// answerNothingPending is fetchNothingPending's answer for the device d at the fetch's address,
// read under its lock, which the caller holds.
func (s *Service) answerNothingPending(ctx context.Context, f ConfigFetch, d Device) (NodeConfig, Outcome, error) {
	out := outcomeFor(d, RequestAction(d.Owned.Request), "deliver", "refused")
	out.Detail = "from " + f.RemoteAddr.String()
	lost := func() (NodeConfig, Outcome, error) {
		out.Result = "lost"
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedGone, "config_lost",
			"the pending configuration of %s was lost when fleetd restarted; set desired_action=provision in NetBox to provision again", d.Name))
	}
	state := s.pending.state(d.ID)
	provisioning := RequestAction(d.Owned.Request) == ActionProvision &&
		(d.Owned.State == StateInstalling || d.Owned.State == StateConfiguring)
	switch {
	case state == pendingDelivered || d.Owned.State == StateActive && RequestAction(d.Owned.Request) == ActionProvision:
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedGone, "config_delivered",
			"the configuration of %s was already delivered and is served only once; provision the device again for a new one", d.Name))
	case provisioning && state == pendingNone:
		if _, err := s.followPending(ctx, d, ActionProvision, out); err != nil { // records the loss
			s.log.Warn().Err(err).Str("device", d.Name).Msg("recording the lost configuration failed; the reconcile retries")
		}
		return lost()
	case RequestAction(d.Owned.Request) == ActionProvision && d.Owned.State == StateFailed && strings.Contains(d.Owned.Message, lostMarker):
		return lost()
	case state == pendingExpired:
		return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedGone, "config_expired",
			"the configuration of %s expired before it was fetched; provision the device again", d.Name))
	}
	return NodeConfig{}, out, s.fetchRefused(f, Refuse(RefusedNotFound, "no_pending_config",
		"no configuration is pending for %s (fleet_state %s); it is rendered when a provision request attests", d.Name, stateWord(d.Owned.State)))
}

func (s *Service) fetchRefused(f ConfigFetch, r *Refusal) error {
	s.metrics.deliveries.WithLabelValues(string(f.Kind), r.Code).Inc()
	return r
}

func stateWord(st State) string {
	if st == StateNone {
		return "empty"
	}
	return string(st)
}

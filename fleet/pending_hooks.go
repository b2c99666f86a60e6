package fleet

import (
	"context"
	"fmt"
	"net/netip"
)

// The request lifecycle and the pending configurations meet here.

// onAccepted forgets any configuration of an earlier request: a new request supersedes it.
func (s *Service) onAccepted(id int64) { s.pending.Drop(id) }

// onEnded drops the configuration of a request that failed, so nothing is served for it.
func (s *Service) onEnded(id int64, to State) {
	if to == StateFailed {
		s.pending.Drop(id)
	}
}

func (s *Service) hasPending(id int64) bool {
	_, ok := s.pending.Peek(id)
	return ok
}

// pendingState is what the store knows of a device's configuration.
type pendingState int

const (
	pendingNone      pendingState = iota // nothing in this process: never rendered here, or lost in a restart
	pendingWaiting                       // rendered, waiting for its fetch
	pendingDelivered                     // fetched
	pendingExpired                       // dropped unfetched when its time was up
)

func (p *Pending) state(id int64) pendingState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.items[id]; ok {
		return pendingWaiting
	}
	switch p.gone[id] {
	case tombDelivered:
		return pendingDelivered
	case tombExpired:
		return pendingExpired
	}
	return pendingNone
}

// byAddress finds the device whose pending configuration is bound to addr.
func (p *Pending) byAddress(addr netip.Addr) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, it := range p.items {
		if it.entry.Address == addr.Unmap() {
			return id, true
		}
	}
	return 0, false
}

// byUUID finds the device whose pending configuration is bound to the SMBIOS UUID.
func (p *Pending) byUUID(uuid string) (PendingEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range p.items {
		if normUUID(it.entry.AttestedUUID) == normUUID(uuid) {
			return it.entry, true
		}
	}
	return PendingEntry{}, false
}

// followPending looks after the configuration of a running provision whose Workflow has not ended.
// A configuration rendered at attestation must be in memory until the node fetches it; if it is
// not, fleetd restarted (it was lost) or its time ran out, and the request cannot complete.
// A configuration delivered while NetBox could not be written is recorded now.
func (s *Service) followPending(ctx context.Context, d Device, action Action, out Outcome) (Outcome, error) {
	if action != ActionProvision || (d.Owned.State != StateInstalling && d.Owned.State != StateConfiguring) {
		return out, nil
	}
	switch s.pending.state(d.ID) {
	case pendingWaiting:
		return out, nil
	case pendingDelivered:
		msg := fmt.Sprintf("The configuration of %s was delivered; recorded late because NetBox could not be written at the time.", d.Name)
		return s.apply(ctx, d, action, EventDelivered, msg)
	case pendingExpired:
		s.metrics.pendingLost.WithLabelValues("expired").Inc()
		msg := fmt.Sprintf("%s request %s failed: the node did not fetch its configuration before it expired; set desired_action=provision to provision again.",
			action, d.Owned.Request)
		return s.apply(ctx, d, action, EventConfigLost, msg)
	}
	s.metrics.pendingLost.WithLabelValues("restart").Inc()
	return s.apply(ctx, d, action, EventConfigLost, lostMessage(d))
}

// lostMarker is in the message of every request failed by a lost configuration, so a later fetch
// can still be told "lost" (NetBox keeps the message; fleetd keeps nothing).
const lostMarker = "was lost when fleetd restarted"

func lostMessage(d Device) string {
	return fmt.Sprintf("provision request %s failed: the pending configuration of %s %s (configurations hold cluster secrets and live only in memory); set desired_action=provision to provision again.",
		d.Owned.Request, d.Name, lostMarker)
}

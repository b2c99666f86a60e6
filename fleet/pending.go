package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// The pending store holds each device's rendered configuration between its attestation and the
// node's one fetch (docs/design.md §1 steps 4 and 6, §6). It lives in memory only, by design: the
// configurations carry cluster secrets, and a fleetd restart loses them (docs/design.md §1, "Limits").
//
// Trust assumptions. A fetch carries two claims, both checked here against values fleetd holds:
// the SMBIOS UUID in the query (claimedUUID; Talos fills it in from the firmware) must equal the
// UUID the attested agent reported, and the request's source address (remoteAddr) must equal
// the device's NetBox address. Neither is a secret nor a proof: a UUID can be read off the
// machine and an address can be spoofed on the local network. They bind delivery to the machine
// as well as the network does, and they keep a mistaken or stale node from taking another's
// configuration. A claim that fails does not consume the configuration, so a wrong fetch cannot
// deny the right machine its one fetch.

// Outcomes of Take other than success. The handlers map them to HTTP answers (docs/design.md §6); the
// lifecycle maps expiry to EventConfigLost. They are wrapped: test with errors.Is.
var (
	// ErrPendingNotFound: nothing is pending for the device in this process. After a restart
	// this means the configuration was lost; the caller tells lost from never-rendered by the
	// device's fleet_state in NetBox.
	ErrPendingNotFound = errors.New("no configuration is pending for the device")
	// ErrPendingDelivered: the configuration was delivered already (a second fetch).
	ErrPendingDelivered = errors.New("the configuration was already delivered")
	// ErrPendingExpired: the configuration waited longer than the store's TTL and was dropped.
	ErrPendingExpired = errors.New("the pending configuration expired")
	// ErrPendingWrongUUID: the claimed UUID is not the attested one. Nothing was consumed.
	ErrPendingWrongUUID = errors.New("the claimed UUID is not the attested one")
	// ErrPendingWrongAddress: the request did not come from the device's NetBox address.
	// Nothing was consumed.
	ErrPendingWrongAddress = errors.New("the request did not come from the device's address")
)

// DefaultPendingTTL is how long a configuration waits for its fetch when PendingConfig sets no
// TTL: an install Workflow (one hour by default) plus Talos's three hours of retries.
const DefaultPendingTTL = 4 * time.Hour

// PendingConfig configures the store.
type PendingConfig struct {
	Clock Clock
	TTL   time.Duration // 0 means DefaultPendingTTL
}

// PendingEntry is what Put stores for one device.
type PendingEntry struct {
	Device       string // the device name, for logs and journal entries
	Config       NodeConfig
	AttestedUUID string     // SMBIOS UUID the attested agent reported
	Address      netip.Addr // the device's NetBox address
}

// PendingInfo describes a pending configuration without its body (for GET /v1/devices).
type PendingInfo struct {
	Device  string
	Kind    Kind
	Summary string
	Expires time.Time
}

// Expired is one configuration the sweep dropped.
type Expired struct {
	DeviceID int64
	Device   string
	Summary  string
	Expired  time.Time
}

type pendingItem struct {
	entry   PendingEntry
	expires time.Time
}

type tombstone uint8

const (
	tombDelivered tombstone = iota + 1
	tombExpired
)

// Pending is the one-time store. It is safe for concurrent use.
type Pending struct {
	clock Clock
	ttl   time.Duration

	mu    sync.Mutex
	items map[int64]pendingItem
	// gone remembers, until restart, devices whose configuration was delivered or expired, so
	// a later fetch gets its own answer instead of "not found". One small entry per device.
	gone map[int64]tombstone
}

// NewPending builds an empty store.
func NewPending(cfg PendingConfig) (*Pending, error) {
	if cfg.Clock == nil {
		return nil, errors.New("new pending store: no clock")
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("new pending store: TTL %s is negative", cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultPendingTTL
	}
	return &Pending{clock: cfg.Clock, ttl: cfg.TTL, items: map[int64]pendingItem{}, gone: map[int64]tombstone{}}, nil
}

// Put stores the configuration of a device, replacing any earlier one (a new request supersedes
// the old), and returns when it expires.
func (p *Pending) Put(deviceID int64, e PendingEntry) (expires time.Time, err error) {
	switch {
	case normUUID(e.AttestedUUID) == "":
		return time.Time{}, fmt.Errorf("put pending config for %s: no attested UUID to bind it to", e.Device)
	case !e.Address.IsValid():
		return time.Time{}, fmt.Errorf("put pending config for %s: no NetBox address to bind it to", e.Device)
	case len(e.Config.Body) == 0:
		return time.Time{}, fmt.Errorf("put pending config for %s: the configuration is empty", e.Device)
	}
	e.Address = e.Address.Unmap()
	expires = p.clock.Now().Add(p.ttl)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.items[deviceID] = pendingItem{entry: e, expires: expires}
	delete(p.gone, deviceID)
	return expires, nil
}

// Take returns the device's configuration exactly once: only when claimedUUID equals the
// attested UUID (case-insensitively) and remoteAddr equals the device's NetBox address. On
// success the configuration leaves the store and the device is remembered as delivered.
// A wrong UUID or address leaves the configuration in place.
func (p *Pending) Take(deviceID int64, claimedUUID string, remoteAddr netip.Addr) (NodeConfig, error) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	it, ok := p.items[deviceID]
	if !ok {
		switch p.gone[deviceID] {
		case tombDelivered:
			return NodeConfig{}, fmt.Errorf("take pending config for device %d: %w", deviceID, ErrPendingDelivered)
		case tombExpired:
			return NodeConfig{}, fmt.Errorf("take pending config for device %d: %w", deviceID, ErrPendingExpired)
		}
		return NodeConfig{}, fmt.Errorf("take pending config for device %d: %w", deviceID, ErrPendingNotFound)
	}
	if !now.Before(it.expires) {
		return NodeConfig{}, fmt.Errorf("take pending config for %s: %w at %s", it.entry.Device, ErrPendingExpired,
			it.expires.UTC().Format(time.RFC3339))
	}
	if normUUID(claimedUUID) != normUUID(it.entry.AttestedUUID) {
		return NodeConfig{}, fmt.Errorf("take pending config for %s: %w (claimed %q)", it.entry.Device, ErrPendingWrongUUID, claimedUUID)
	}
	if remoteAddr.Unmap() != it.entry.Address {
		return NodeConfig{}, fmt.Errorf("take pending config for %s: %w (request from %s, NetBox address %s)",
			it.entry.Device, ErrPendingWrongAddress, remoteAddr, it.entry.Address)
	}
	delete(p.items, deviceID)
	p.gone[deviceID] = tombDelivered
	return it.entry.Config, nil
}

// Drop removes the device's pending configuration, if any, and forgets that one was delivered
// or expired (the request failed or a new one superseded it). It reports whether one was pending.
func (p *Pending) Drop(deviceID int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.items[deviceID]
	delete(p.items, deviceID)
	delete(p.gone, deviceID)
	return ok
}

// Sweep drops every configuration whose time is up and returns them, oldest first, so the
// reconcile can end their requests (EventConfigLost). Later fetches get ErrPendingExpired.
func (p *Pending) Sweep() []Expired {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Expired
	for id, it := range p.items {
		if now.Before(it.expires) {
			continue
		}
		out = append(out, Expired{DeviceID: id, Device: it.entry.Device, Summary: it.entry.Config.Summary, Expired: it.expires})
		delete(p.items, id)
		p.gone[id] = tombExpired
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Expired.Equal(out[j].Expired) {
			return out[i].Expired.Before(out[j].Expired)
		}
		return out[i].DeviceID < out[j].DeviceID
	})
	return out
}

// Peek describes the device's pending configuration, if one is pending (expired or not).
func (p *Pending) Peek(deviceID int64) (PendingInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	it, ok := p.items[deviceID]
	if !ok {
		return PendingInfo{}, false
	}
	return PendingInfo{Device: it.entry.Device, Kind: it.entry.Config.Kind, Summary: it.entry.Config.Summary, Expires: it.expires}, true
}

// Len is the number of configurations pending (expired ones included until the next sweep).
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.items)
}

// normUUID is the form UUIDs are compared in: SMBIOS tools print them in upper or lower case.
func normUUID(s string) string {
	return strings.ToLower(strings.TrimSpace(s))
}

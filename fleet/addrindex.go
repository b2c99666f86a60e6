package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// addrIndex finds the device at a configuration fetch's source address without asking NetBox.
// A fetch is unauthenticated (docs/security.md, "A hostile host on the lab network"), so an
// address no device has must cost NetBox nothing: before the index, one fetch from an unknown
// address cost a NetBox query, and a device list before that.
//
// It is a cache of NetBox, never a source of truth. It holds each device's primary IPv4 as fleetd
// last saw it: the reconcile's listing replaces it whole (every reconcile.interval), and every
// single device fleetd reads or writes updates its entry (indexedNetBox) — so the Workflow
// watch's reads, on every instance, refresh a device's entry while its install runs, before its
// node fetches. A hit is confirmed by reading the device, which the fetch needs anyway for its
// ETag; a miss answers unknown_address. Each fleetd instance keeps its own index; an instance
// that has not yet seen a device's new address answers its fetch 404 until its next read of the
// device or its next reconcile, and the node asks again (docs/design.md §9).
type addrIndex struct {
	mu     sync.Mutex
	built  bool
	seq    uint64                 // counts observations
	byAddr map[netip.Addr][]int64 // device ids by primary IPv4
	addrOf map[int64]netip.Addr
	// seen is the seq of each device's last single observation: a listing that began before it
	// does not undo it (the listing read the device earlier).
	seen map[int64]uint64

	build     sync.Mutex // one listing at a time for fetches that find the index empty
	lastBuild time.Time  // when such a listing last failed
}

func newAddrIndex() *addrIndex {
	return &addrIndex{byAddr: map[netip.Addr][]int64{}, addrOf: map[int64]netip.Addr{}, seen: map[int64]uint64{}}
}

// observe records one device as NetBox answered it.
func (x *addrIndex) observe(d Device) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seq++
	x.seen[d.ID] = x.seq
	x.set(d.ID, d.IP().Unmap())
}

// forget records that a device no longer exists.
func (x *addrIndex) forget(id int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seq++
	x.seen[id] = x.seq
	x.set(id, netip.Addr{})
}

// set moves device id to addr (invalid: out of the index). The caller holds mu.
func (x *addrIndex) set(id int64, addr netip.Addr) {
	if old, ok := x.addrOf[id]; ok {
		ids := x.byAddr[old]
		for i, v := range ids {
			if v == id {
				ids = append(ids[:i:i], ids[i+1:]...)
				break
			}
		}
		if len(ids) == 0 {
			delete(x.byAddr, old)
		} else {
			x.byAddr[old] = ids
		}
		delete(x.addrOf, id)
	}
	if addr.IsValid() {
		x.addrOf[id] = addr
		x.byAddr[addr] = append(x.byAddr[addr], id)
	}
}

// begin marks the start of a listing; replace applies its result.
func (x *addrIndex) begin() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq
}

// replace makes the index the listing's devices, except those observed on their own since the
// listing began (begin's start).
func (x *addrIndex) replace(devices []Device, start uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	keep := map[int64]netip.Addr{}
	for id, s := range x.seen {
		if s > start {
			keep[id] = x.addrOf[id]
		}
	}
	x.byAddr, x.addrOf, x.seen = map[netip.Addr][]int64{}, map[int64]netip.Addr{}, map[int64]uint64{}
	for _, d := range devices {
		if _, newer := keep[d.ID]; !newer {
			x.set(d.ID, d.IP().Unmap())
		}
	}
	for id, addr := range keep {
		x.seq++
		x.seen[id] = x.seq
		x.set(id, addr)
	}
	x.built = true
}

// lookup is the ids of the devices whose primary IPv4 is addr, and whether a listing ever filled
// the index.
func (x *addrIndex) lookup(addr netip.Addr) ([]int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]int64(nil), x.byAddr[addr.Unmap()]...), x.built
}

// indexedNetBox keeps the address index up to date from every device the service reads or
// writes.
type indexedNetBox struct {
	NetBox
	idx *addrIndex
}

func (i indexedNetBox) Device(ctx context.Context, id int64) (Device, error) {
	d, err := i.NetBox.Device(ctx, id)
	return i.read(id, d, err)
}

func (i indexedNetBox) DeviceFields(ctx context.Context, id int64) (Device, error) {
	d, err := i.NetBox.DeviceFields(ctx, id)
	return i.read(id, d, err)
}

// read keeps the index up to date with one read of device id: its addresses if it was read, none
// if NetBox has no such device.
func (i indexedNetBox) read(id int64, d Device, err error) (Device, error) {
	switch {
	case err == nil:
		i.idx.observe(d)
	case errors.Is(err, ErrNotFound):
		i.idx.forget(id)
	}
	return d, err
}

func (i indexedNetBox) Devices(ctx context.Context) ([]Device, error) {
	start := i.idx.begin()
	ds, err := i.NetBox.Devices(ctx)
	if err == nil {
		i.idx.replace(ds, start)
	}
	return ds, err
}

func (i indexedNetBox) Update(ctx context.Context, id int64, p Patch) (Device, error) {
	d, err := i.NetBox.Update(ctx, id, p)
	if err == nil {
		i.idx.observe(d)
	}
	return d, err
}

// indexRetry is how long a fetch that found the index never filled waits after a failed
// listing before it lists again: while NetBox is down, fetches cost it one listing per
// indexRetry, not one per fetch.
const indexRetry = 10 * time.Second

// deviceAt finds the device whose primary IPv4 is addr, from the index (ErrNotFound when none
// has it, at no NetBox cost). Only a fetch that finds the index never filled — this fleetd has
// not listed NetBox's devices yet — lists them, once for all such fetches. A hit is read from
// NetBox; a device that moved since the index saw it is not found (the read moved its entry).
func (s *Delivery) deviceAt(ctx context.Context, addr netip.Addr) (Device, error) {
	addr = addr.Unmap()
	ids, built := s.addrs.lookup(addr)
	if !built {
		if err := s.fillIndex(ctx); err != nil {
			return Device{}, err
		}
		ids, _ = s.addrs.lookup(addr)
	}
	switch {
	case len(ids) == 0:
		return Device{}, fmt.Errorf("no device has %s as its primary IPv4: %w", addr, ErrNotFound)
	case len(ids) > 1:
		return Device{}, Refuse(RefusedConflict, "address_shared",
			"%d NetBox devices (ids %v) have %s as their primary IPv4: give each machine its own address", len(ids), ids, addr)
	}
	d, err := s.core.netbox.Device(ctx, ids[0])
	if err == nil && d.IP() != addr {
		err = fmt.Errorf("device %s moved from %s to %s: %w", d.Name, addr, d.IP(), ErrNotFound)
	}
	return d, err
}

// fillIndex lists the devices for a fetch that found the index never filled, unless another
// fetch did meanwhile or a listing failed less than indexRetry ago.
func (s *Delivery) fillIndex(ctx context.Context) error {
	s.addrs.build.Lock()
	defer s.addrs.build.Unlock()
	if _, built := s.addrs.lookup(netip.Addr{}); built {
		return nil
	}
	if !s.addrs.lastBuild.IsZero() && s.core.clock.Now().Sub(s.addrs.lastBuild) < indexRetry {
		return fmt.Errorf("find devices by address: %w: NetBox's devices are not read yet, and the last try failed", ErrNetBoxUnavailable)
	}
	if _, err := s.core.netbox.Devices(ctx); err != nil {
		s.addrs.lastBuild = s.core.clock.Now()
		return fmt.Errorf("find devices by address: list devices: %w: %w", ErrNetBoxUnavailable, err)
	}
	return nil
}

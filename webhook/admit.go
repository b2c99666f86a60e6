package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"io"
	"net/http"
	"net/netip"
	"time"
)

// What a webhook costs before it is authenticated (docs/security.md, "Transport and abuse").
// Anyone who reaches the listener can send a body, and anyone who may view webhooks in NetBox can
// read the secret and sign one, so a body's cost is bounded whoever sent it:
//
//   - its size: MaxBody, the route table's cap, at least twice NetBox's largest delivery;
//   - its time: once its turn came, Config.BodyTimeout to arrive whole;
//   - how many are read at once: a pool of slots per kind of source. NetBox's own addresses
//     (Config.Sources) have a pool of their own, whose deliveries wait for a slot — NetBox does
//     not send a refused delivery again (RQ_RETRY_MAX is 0 by default; NetBox 4.6.8
//     netbox/utilities/rqworker.py), so a storm of them is read as fast as slots free up. Every
//     other source shares a small pool and is refused busy at once when it is full, so other
//     hosts' bodies never hold NetBox's deliveries back;
//   - the signature header is checked for its form before the body is read, and the HMAC is
//     computed over the body as it arrives; only a verified body is decoded.
//
// A signed body then costs at most a place in the queue (Config.Queue; an event for a device
// whose event waits is coalesced into it) and a worker's re-read of the device (Config.Workers).
// Every refusal is counted (fleetd_webhooks_total) and logged sampled (refusalLog).

// The defaults of the admission's Config fields.
const (
	DefaultBodyTimeout = 10 * time.Second
	DefaultNetBoxSlots = 16
	DefaultOtherSlots  = 4
	DefaultNetBoxWait  = 20 * time.Second
)

// pool is a number of slots, each one body read and verified at once.
type pool struct {
	name  string
	slots chan struct{}
	wait  time.Duration // how long a request waits for a slot; 0: refused at once when all are taken
}

func newPool(name string, slots int, wait time.Duration) *pool {
	return &pool{name: name, slots: make(chan struct{}, slots), wait: wait}
}

// acquire takes a slot, waiting for one up to p.wait (or until ctx ends), and reports whether it
// got one; the caller releases it.
func (p *pool) acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
	}
	if p.wait <= 0 {
		return false
	}
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (p *pool) release() { <-p.slots }

// poolOf is the pool of a request from peer: NetBox's when peer is one of Config.Sources, or when
// none is configured (every source then shares it); the others' otherwise.
func (in *Intake) poolOf(peer netip.Addr) *pool {
	if len(in.cfg.Sources) == 0 {
		return in.netbox
	}
	for _, p := range in.cfg.Sources {
		if p.Contains(peer) {
			return in.netbox
		}
	}
	return in.other
}

// peerOf is the request's TCP peer address, unmapped; the zero Addr when it cannot be read.
func peerOf(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}

// signatureOf reads X-Hook-Signature: 128 hex digits, NetBox's HMAC-SHA512 (NetBox 4.6.8
// netbox/extras/webhooks.py generate_signature: lowercase hex, no prefix); ok is false for
// anything else, which is refused before the body is read.
func signatureOf(header string) (mac []byte, ok bool) {
	mac, err := hex.DecodeString(header)
	return mac, err == nil && len(mac) == sha512.Size
}

// readSigned reads body (capped by the route) while it computes its HMAC-SHA512 with the webhook
// secret, and reports whether that is want, compared in constant time, over the exact bytes
// received.
func (in *Intake) readSigned(body io.Reader, want []byte) ([]byte, bool, error) {
	mac := hmac.New(sha512.New, in.cfg.Secret)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.TeeReader(body, mac)); err != nil {
		return nil, false, err
	}
	return buf.Bytes(), hmac.Equal(mac.Sum(nil), want), nil
}

// unread closes the connection after the answer to a request whose body was not read to its end:
// Go's server would otherwise read up to 256 KiB more of it to keep the connection.
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

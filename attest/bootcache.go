package attest

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"github.com/google/go-attestation/attest"
)

// A node checks the same boot every hour (docs/design.md §5): the same event log, replayed to the
// same PCR values, under quotes that differ only in their nonce. Parsing and replaying the log is
// most of a check's cost and its result depends on nothing but the log's bytes and the quoted
// SHA-256 PCR values, so a BootCache keeps, per device, the last boot it replayed, keyed by both
// digests. A repeated check then costs its quote signatures, the hash of the log, and the
// comparisons; a log or a PCR value that differs in one bit is a miss and is replayed in full.
// Only boots that replayed are kept: a log that was refused is refused again the same way, at
// full cost.

// cachedBoot is one device's last replayed boot: what a boot check uses of it. The baseline is
// kept as its digest: a repeated check's device holds the same text (boot_baseline, recorded by
// the check that replayed it), so the cache need not, and at a few KB a boot (one line per
// event) a full cache of the text would be most of fleetd's memory at 10,000 nodes. Only a boot
// whose baseline differs from the one its device held when it was replayed (a drift, until the
// operator accepts it) keeps its text.
type cachedBoot struct {
	log, pcrs, baseline [sha256.Size]byte
	drifted             string                  // the baseline's text, when it was not the device's stored one
	secureBoot          *attest.SecurebootState // only Enabled
	secureBootErr       error
}

// BootCache is a bounded cache of replayed boots, one per device. It is safe for concurrent use.
type BootCache struct {
	mu      sync.Mutex
	max     int
	devices map[string]cachedBoot
}

// NewBootCache holds at most max devices' boots (about 150 bytes each, a drifted one's baseline
// text besides). Past max, a new device's boot replaces another device's, whose next check is
// then replayed in full.
func NewBootCache(max int) *BootCache {
	return &BootCache{max: max, devices: map[string]cachedBoot{}}
}

// Len is the number of devices whose boot the cache holds.
func (c *BootCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.devices)
}

// VerifyPlatform is VerifyPlatform for the boot check of device, stored being the baseline the
// device holds (boot_baseline): every quote is verified, and the event log is replayed unless it
// and the quoted SHA-256 PCR values are those of the last boot the device's checks replayed and
// that boot's baseline is at hand, as stored or as the drifted text kept (its digest compared). A
// boot from the cache has no Events.
func (c *BootCache) VerifyPlatform(device, stored string, ak *VerifiedAK, nonce []byte, claimed attest.PlatformParameters) (*VerifiedBoot, error) {
	pcrs, err := verifyQuotes(ak, nonce, claimed)
	if err != nil {
		return nil, err
	}
	logSum, pcrSum := sha256.Sum256(claimed.EventLog), pcrDigest(pcrs)
	c.mu.Lock()
	e, ok := c.devices[device]
	c.mu.Unlock()
	if ok && e.log == logSum && e.pcrs == pcrSum {
		text := stored
		if e.drifted != "" {
			text = e.drifted
		}
		if sha256.Sum256([]byte(text)) == e.baseline {
			if e.drifted != "" && e.drifted == stored { // recorded since (a first check's): no longer kept
				c.forgetText(device, e)
			}
			return &VerifiedBoot{BaselineText: text, SecureBoot: e.secureBoot, SecureBootErr: e.secureBootErr}, nil
		}
	}
	vb, err := replayBoot(claimed.EventLog, pcrs)
	if err != nil {
		return nil, err
	}
	e = cachedBoot{log: logSum, pcrs: pcrSum, baseline: sha256.Sum256([]byte(vb.BaselineText)), secureBootErr: vb.SecureBootErr}
	if vb.BaselineText != stored {
		e.drifted = vb.BaselineText
	}
	if vb.SecureBoot != nil {
		e.secureBoot = &attest.SecurebootState{Enabled: vb.SecureBoot.Enabled}
	}
	c.put(device, e)
	return vb, nil
}

// forgetText drops the baseline text of device's entry e, unless the entry changed meanwhile.
func (c *BootCache) forgetText(device string, e cachedBoot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.devices[device]; ok && cur.log == e.log && cur.pcrs == e.pcrs && cur.baseline == e.baseline {
		cur.drifted = ""
		c.devices[device] = cur
	}
}

// TextBytes is the size of the baseline texts the cache holds: those of drifted boots only.
func (c *BootCache) TextBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.devices {
		n += len(e.drifted)
	}
	return n
}

// put stores a device's boot, evicting another device's when the cache is full.
func (c *BootCache) put(device string, e cachedBoot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.devices[device]; !ok && len(c.devices) >= c.max {
		for other := range c.devices { // map order: an arbitrary device
			delete(c.devices, other)
			break
		}
	}
	c.devices[device] = e
}

// pcrDigest is a digest of the quote-verified SHA-256 PCRs (index and value, in index order).
func pcrDigest(pcrs []attest.PCR) [sha256.Size]byte {
	h := sha256.New()
	var idx [4]byte
	for _, p := range pcrs {
		binary.BigEndian.PutUint32(idx[:], uint32(p.Index)) //nolint:gosec // G115: a PCR index is 0 to 23
		h.Write(idx[:])
		h.Write(p.Digest)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

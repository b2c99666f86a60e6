package attest_test

import (
	"crypto/sha256"
	"slices"
	"testing"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// TestBootCache checks that a node's repeated check of the same boot is answered from the cache
// and that nothing else is: a log that is not the one the TPM measured is refused after a cached
// check exactly as before it, a quote is verified every time, a changed PCR value is replayed in
// full, and the cache holds no more devices than its bound.
func TestBootCache(t *testing.T) {
	m, ak, vak := bootCacheMachine(t)
	nonce := func(b byte) []byte { return slices.Repeat([]byte{b}, attest.NonceSize) }
	quote := func(n []byte, log []byte) ga.PlatformParameters {
		t.Helper()
		pp, err := m.AttestPlatform(ak, n, log)
		if err != nil {
			t.Fatal(err)
		}
		return *pp
	}
	cache := attest.NewBootCache(2)
	first, err := cache.VerifyPlatform("node-a", "", vak, nonce(1), quote(nonce(1), eventlogs.RHEL8SecureBoot))
	if err != nil || len(first.Events) == 0 {
		t.Fatalf("first check: %v (%d events), want the log replayed", err, len(first.Events))
	}
	stored := first.BaselineText // the first check recorded it

	t.Run("ok/the-same-boot-with-its-PCRs-in-another-order-from-the-cache", func(t *testing.T) {
		pp := quote(nonce(2), eventlogs.RHEL8SecureBoot)
		pp.PCRs = slices.Clone(pp.PCRs)
		slices.Reverse(pp.PCRs)
		vb, err := cache.VerifyPlatform("node-a", stored, vak, nonce(2), pp)
		if err != nil || vb.Events != nil || vb.BaselineText != first.BaselineText {
			t.Fatalf("the same boot, PCRs in reverse: %v (%d events), want it from the cache (no events)", err, len(vb.Events))
		}
	})
	t.Run("ok/the-same-boot-again-from-the-cache", func(t *testing.T) {
		vb, err := cache.VerifyPlatform("node-a", stored, vak, nonce(2), quote(nonce(2), eventlogs.RHEL8SecureBoot))
		if err != nil || vb.Events != nil {
			t.Fatalf("repeated check: %v (%d events), want it from the cache (no events)", err, len(vb.Events))
		}
		if vb.BaselineText != first.BaselineText || vb.SecureBoot == nil || vb.SecureBoot.Enabled != first.SecureBoot.Enabled ||
			len(attest.DiffBaseline(first.Baseline(), vb.Baseline())) != 0 {
			t.Fatalf("the cached boot is not the replayed one: secure boot %v, baseline\n%s", vb.SecureBoot, vb.BaselineText)
		}
	})
	for _, tc := range []struct {
		name string
		pp   func() ga.PlatformParameters
		want attest.Check
	}{
		{"refuse/another-boot's-log-after-a-cached-check", func() ga.PlatformParameters { return quote(nonce(3), eventlogs.RHEL8OtherKernel()) }, attest.CheckEventLog},
		{"refuse/a-truncated-log-after-a-cached-check", func() ga.PlatformParameters {
			return quote(nonce(3), eventlogs.RHEL8SecureBoot[:len(eventlogs.RHEL8SecureBoot)/2])
		}, attest.CheckEventLog},
		{"refuse/a-quote-over-another-nonce-after-a-cached-check", func() ga.PlatformParameters { return quote(nonce(4), eventlogs.RHEL8SecureBoot) }, attest.CheckQuote},
		{"refuse/a-PCR-value-not-the-quoted-one-after-a-cached-check", func() ga.PlatformParameters {
			pp := quote(nonce(3), eventlogs.RHEL8SecureBoot)
			pp.PCRs = slices.Clone(pp.PCRs)
			i := pcrAt(t, pp.PCRs, 23)
			pp.PCRs[i].Digest = sha256Of([]byte("another value"))
			return pp
		}, attest.CheckQuote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cache.VerifyPlatform("node-a", stored, vak, nonce(3), tc.pp())
			if r, ok := attest.AsRefusal(err); !ok || r.Check != tc.want {
				t.Fatalf("VerifyPlatform: %v, want refusal %s", err, tc.want)
			}
		})
	}
	t.Run("ok/a-changed-PCR-is-replayed-in-full", func(t *testing.T) {
		// PCR 23 has no events in the log: extending it changes the quoted values but not the boot.
		sum := sha256.Sum256([]byte("application measurement"))
		if err := tpm2.PCRExtend(m.rw, 23, tpm2.AlgSHA256, sum[:], ""); err != nil {
			t.Fatal(err)
		}
		vb, err := cache.VerifyPlatform("node-a", stored, vak, nonce(5), quote(nonce(5), eventlogs.RHEL8SecureBoot))
		if err != nil || len(vb.Events) == 0 || vb.BaselineText != first.BaselineText {
			t.Fatalf("check after a PCR changed: %v (%d events), want the log replayed in full to the same baseline", err, len(vb.Events))
		}
	})
	t.Run("bound", func(t *testing.T) {
		pp := quote(nonce(6), eventlogs.RHEL8SecureBoot)
		for _, d := range []string{"node-b", "node-c", "node-d"} {
			if _, err := cache.VerifyPlatform(d, stored, vak, nonce(6), pp); err != nil {
				t.Fatal(err)
			}
			if n := cache.Len(); n != 2 { // node-a and node-b, then one replaced at each new device
				t.Fatalf("the cache holds %d devices after %s, want 2: as many as its bound, no more", n, d)
			}
		}
		replayed := 0
		for _, d := range []string{"node-b", "node-c", "node-d"} {
			vb, err := cache.VerifyPlatform(d, stored, vak, nonce(6), pp)
			if err != nil {
				t.Fatal(err)
			}
			if vb.Events != nil {
				replayed++
			}
		}
		if replayed == 0 {
			t.Fatal("three devices' checks all came from a cache bounded at two")
		}
	})
}

// TestBootCacheKeepsNoBaselineText: the cache keeps a boot's baseline as its digest and answers a
// repeated check with the device's stored baseline, once that is the replayed one; the text is
// kept only while it is not (a first check's, until recorded; a drift), and a stored baseline
// that is not the replayed one is never answered as the boot's.
func TestBootCacheKeepsNoBaselineText(t *testing.T) {
	m, ak, vak := bootCacheMachine(t)
	cache := attest.NewBootCache(4)
	n := byte(0)
	check := func(stored string) *attest.VerifiedBoot {
		t.Helper()
		n++
		nonce := slices.Repeat([]byte{n}, attest.NonceSize)
		pp, err := m.AttestPlatform(ak, nonce, eventlogs.RHEL8SecureBoot)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := cache.VerifyPlatform("node-a", stored, vak, nonce, *pp)
		if err != nil {
			t.Fatal(err)
		}
		return vb
	}
	first := check("") // installed: nothing recorded yet
	text := first.BaselineText
	if cache.TextBytes() != len(text) {
		t.Fatalf("after a first check the cache holds %d bytes of text, want the baseline's %d until it is recorded", cache.TextBytes(), len(text))
	}
	if vb := check(""); vb.Events != nil || vb.BaselineText != text {
		t.Errorf("a repeated check before the baseline was recorded: replayed %v, baseline %q; want the kept text from the cache", vb.Events != nil, vb.BaselineText)
	}
	if vb := check(text); vb.Events != nil || vb.BaselineText != text || cache.TextBytes() != 0 {
		t.Errorf("a repeated check of the recorded baseline: replayed %v, the cache holds %d bytes of text; want it from the cache, no text kept",
			vb.Events != nil, cache.TextBytes())
	}
	for _, stored := range []string{"", text + "\n0 EV_POST_CODE 00 forged", "another baseline"} {
		vb := check(stored)
		if vb.Events == nil || vb.BaselineText != text {
			t.Errorf("stored baseline %q, not the replayed one: from the cache %v, baseline %q; want the log replayed to its own baseline",
				stored, vb.Events == nil, vb.BaselineText)
		}
		check(text) // recorded again: the text is dropped
	}
	if vb := check(text); vb.Events != nil || cache.TextBytes() != 0 {
		t.Errorf("the recorded baseline again: replayed %v, %d bytes of text kept; want it from the cache, none kept", vb.Events != nil, cache.TextBytes())
	}
}

// bootCacheMachine is a simulated machine that booted eventlogs.RHEL8SecureBoot, an AK of its
// TPM, and that AK as a verified LAK's key (what a boot check's quotes are verified under).
func bootCacheMachine(t *testing.T) (*machine, *ga.AK, *attest.VerifiedAK) {
	t.Helper()
	m := simMachine(t, eventlogs.RHEL8SecureBoot)
	ak, err := m.NewAK()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ak.Close(m.Attest()) })
	pub, err := ga.ParseAKPublic(ak.AttestationParameters().Public)
	if err != nil {
		t.Fatal(err)
	}
	return m, ak, &attest.VerifiedAK{Public: pub.Public, Hash: pub.Hash}
}

package attest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/pki"
)

// TestLAKCacheBound: the LAK verifier keeps at most lakCacheSize verified leaves, and that many:
// one more leaf replaces one of them.
func TestLAKCacheBound(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Rand: rand.Reader, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewLAKVerifier(LAKVerifierConfig{Issuer: ca.Cert, Above: ca.Above, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lakCacheSize + 1 {
		lak, err := iss.IssueLAK(pki.Identity{DeviceName: "node-a", HWSerialNum: []byte{1}}, key.Public())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(lak.DER()); err != nil {
			t.Fatal(err)
		}
		if want := min(i+1, lakCacheSize); len(v.leaves) != want {
			t.Fatalf("after %d leaves the cache holds %d, want %d", i+1, len(v.leaves), want)
		}
	}
}

// TestRefusalText: a refusal reads "check: message", with its cause after it when it has one;
// a message is capped at maxRefusalMsg bytes, still valid UTF-8, and one of exactly that many
// is kept whole.
func TestRefusalText(t *testing.T) {
	if got := refuse(CheckQuote, "bad %s", "quote").Error(); got != "quote_invalid: bad quote" {
		t.Errorf("refusal without a cause: %q", got)
	}
	if got := refuseErr(CheckQuote, errors.New("short read"), "bad %s", "quote").Error(); got != "quote_invalid: bad quote: short read" {
		t.Errorf("refusal with a cause: %q", got)
	}
	exact := strings.Repeat("a", maxRefusalMsg)
	if got := refuse(CheckQuote, "%s", exact).Msg; got != exact {
		t.Errorf("a message of exactly %d bytes became %d bytes", maxRefusalMsg, len(got))
	}
	// A two-byte character across the cap is dropped whole.
	long := strings.Repeat("a", maxRefusalMsg-1) + "é" + "tail"
	if got := refuse(CheckQuote, "%s", long).Msg; got != strings.Repeat("a", maxRefusalMsg-1)+"…" {
		t.Errorf("a longer message capped to %q…, want %d bytes and an ellipsis", got[len(got)-8:], maxRefusalMsg-1)
	}
}

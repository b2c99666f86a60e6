package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/pki"
)

// bootChecks is a service wired for boot checks (nonces, the LAK CA's verifier) on in-memory
// NetBox, with node-a active and a LAK certificate for it whose key no TPM holds: a check can
// pass every step before the quote, and no further.
type bootChecks struct {
	testService
	inv    *fleettest.NetBox
	lak    *pki.Certificate
	nonces *attest.BootNonceSealer
}

func newBootChecks(t *testing.T) bootChecks {
	t.Helper()
	clock := fleettest.NewClock(testEpoch)
	rnd := mrand.NewChaCha8([32]byte{7})
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Rand: rnd, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: 24 * time.Hour, LAKLifetime: 24 * time.Hour, Rand: rnd, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		t.Fatal(err)
	}
	lak, err := iss.IssueLAK(pki.Identity{DeviceName: "node-a", HWSerialNum: []byte{1}}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	var a fleet.Attestation
	if a.LAK, err = attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: ca.Cert, Above: ca.Above, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	if a.BootNonces, err = attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: make([]byte, attest.TokenKeySize),
		Lifetime: time.Minute, Rand: rnd, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	d := fleettest.Declared(12, "node-a")
	d.Status, d.Owned = fleet.StatusActive, fleet.Owned{State: fleet.StateActive, LAKSerial: lak.SerialHex(), LastBootCheck: testEpoch.Add(-time.Hour)}
	inv := fleettest.NewNetBox(d)
	return bootChecks{testService: newTestServiceWith(inv, fleettest.NewInstaller(), clock, a), inv: inv, lak: lak, nonces: a.BootNonces}
}

// TestBootCheckBeforeTheQuote: the checks a boot check passes before its quote, in their order
// (docs/boot-checks.md): the nonce token, the LAK certificate and the device it names, and under
// the device's lock that the LAK is the device's, the device an active node, and the nonce issued
// after the last accepted check — strictly after: a nonce issued at the very instant of the last
// check is a replay, one issued a nanosecond after it is not. Each refusal here writes nothing to
// NetBox: whoever sent it is not known to be the device. A check that passes them all meets the
// quote, which this node's key (held by no TPM) cannot make: lak_mismatch.
func TestBootCheckBeforeTheQuote(t *testing.T) {
	rows := []struct {
		name     string
		edit     func(n attest.BootNonce, d *fleet.Device, in *fleet.BootCheckInput)
		wantCode string
	}{
		{"ok/every check before the quote passes: the quote is the next, and fails", func(attest.BootNonce, *fleet.Device, *fleet.BootCheckInput) {}, "lak_mismatch"},
		{"ok/the nonce issued a nanosecond after the last accepted check", func(n attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Owned.LastBootCheck = n.IssuedAt.Add(-time.Nanosecond)
		}, "lak_mismatch"},
		{"refuse/the nonce issued at the very instant of the last accepted check", func(n attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Owned.LastBootCheck = n.IssuedAt
		}, "replayed"},
		{"refuse/the nonce issued before the last accepted check", func(n attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Owned.LastBootCheck = n.IssuedAt.Add(time.Millisecond)
		}, "replayed"},
		{"refuse/a device with a request running", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) { d.Owned.State = fleet.StatePending }, "not_active"},
		{"refuse/a decommissioning device", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Status = fleet.StatusDecommissioning
		}, "not_active"},
		{"refuse/a LAK that is no longer the device's", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) { d.Owned.LAKSerial = "00c0ffee" }, "lak_not_current"},
		{"refuse/a wiped device: no LAK at all", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Owned.LAKSerial, d.Owned.State = "", fleet.StateWiped
		}, "lak_not_current"},
		{"refuse/a LAK naming a device NetBox does not have", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) { d.Name = "node-b" }, "unknown_device"},
		{"refuse/a LAK certificate fleetd's LAK CA did not issue", func(_ attest.BootNonce, _ *fleet.Device, in *fleet.BootCheckInput) {
			in.LAKChain = [][]byte{in.LAKChain[1]}
		}, "lak_untrusted"},
		{"refuse/a nonce token fleetd did not seal", func(_ attest.BootNonce, _ *fleet.Device, in *fleet.BootCheckInput) { in.Token = "v1.not-a-token" }, "nonce_invalid"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			b := newBootChecks(t)
			n, _, err := b.BootChecks.BootCheckNonce()
			if err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Second) // the node quotes
			in := fleet.BootCheckInput{Token: n.Token, LAKChain: b.lak.DER()}
			d := b.inv.Get(12)
			r.edit(n, &d, &in)
			b.inv.Set(d)
			before := b.inv.Get(12)
			_, out, err := b.BootChecks.BootCheck(context.Background(), in)
			if ref, ok := fleet.AsRefusal(err); !ok || ref.Code != r.wantCode || out.Result != "refused" {
				t.Fatalf("BootCheck = %+v, %v; want refused %s", out, err, r.wantCode)
			}
			if after := b.inv.Get(12); after.Version != before.Version || len(b.inv.JournalOf(12)) != 0 {
				t.Errorf("a refusal before the device was identified wrote to NetBox: version %s → %s, journal %q", before.Version, after.Version, b.inv.JournalOf(12))
			}
		})
	}
}

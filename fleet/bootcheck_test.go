package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	mrand "math/rand/v2"
	"strings"
	"sync/atomic"
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
	reads  *readCounts // the service's device reads, by kind
	lak    *pki.Certificate
	nonces *attest.BootNonceSealer
	// renewed is a LAK certificate for lak's key issued after it, as a renewal issues one.
	renewed *pki.Certificate
}

// readCounts is the in-memory NetBox counting the reads of a device by kind: a lookup of its id by
// name (a list query on NetBox), a read by id without the MACs, and a full read.
type readCounts struct {
	*fleettest.NetBox
	byName, fields, full atomic.Int32
}

func (r *readCounts) DeviceID(ctx context.Context, name string) (int64, error) {
	r.byName.Add(1)
	return r.NetBox.DeviceID(ctx, name)
}

func (r *readCounts) DeviceFields(ctx context.Context, id int64) (fleet.Device, error) {
	r.fields.Add(1)
	return r.NetBox.DeviceFields(ctx, id)
}

func (r *readCounts) Device(ctx context.Context, id int64) (fleet.Device, error) {
	r.full.Add(1)
	return r.NetBox.Device(ctx, id)
}

// counts is the reads so far: by name, by id without MACs, full.
func (r *readCounts) counts() [3]int32 {
	return [3]int32{r.byName.Load(), r.fields.Load(), r.full.Load()}
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
	renewed, err := iss.IssueLAK(pki.Identity{DeviceName: "node-a", HWSerialNum: []byte{1}}, key.Public())
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
	reads := &readCounts{NetBox: inv}
	return bootChecks{testService: newTestServiceWith(reads, fleettest.NewInstaller(), clock, a), inv: inv, reads: reads, lak: lak,
		renewed: renewed, nonces: a.BootNonces}
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
		{"refuse/a LAK naming a device that was attested under another name (names swapped)", func(_ attest.BootNonce, d *fleet.Device, _ *fleet.BootCheckInput) {
			d.Owned.Identity = fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: "provision-bbbbbbbb", Name: "node-b"}
		}, "device_renamed"},
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

// checkBeforeQuote runs one boot check of node-a after edit changed the device in NetBox and the
// check's input, and returns its refusal; it fails the test when the check wrote to NetBox.
func checkBeforeQuote(t *testing.T, b bootChecks, edit func(n attest.BootNonce, d *fleet.Device, in *fleet.BootCheckInput)) (*fleet.Refusal, error) {
	t.Helper()
	n, _, err := b.BootChecks.BootCheckNonce()
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second) // the node quotes
	in := fleet.BootCheckInput{Token: n.Token, LAKChain: b.lak.DER()}
	d := b.inv.Get(12)
	edit(n, &d, &in)
	b.inv.Set(d)
	before := b.inv.Get(12)
	_, out, err := b.BootChecks.BootCheck(context.Background(), in)
	if out.Result != "refused" {
		t.Errorf("BootCheck's outcome: %+v, want refused", out)
	}
	if after := b.inv.Get(12); after.Version != before.Version || len(b.inv.JournalOf(12)) != 0 {
		t.Errorf("a refusal before the device was identified wrote to NetBox: version %s → %s, journal %q", before.Version, after.Version, b.inv.JournalOf(12))
	}
	r, _ := fleet.AsRefusal(err)
	return r, err
}

// TestBootCheckWhichLAK: which LAK certificate a check may present (docs/boot-checks.md): the
// device's current one (lak_serial), or during a renewal's handover the one it replaced
// (lak_serial_previous); after the handover the replaced one is refused lak_replaced, and a device
// with no current LAK takes none, whatever its lak_serial_previous says. A check that passes meets
// the quote, which no TPM here makes: lak_mismatch.
func TestBootCheckWhichLAK(t *testing.T) {
	rows := []struct {
		name                       string
		present, current, previous string // "lak", "renewed" (a renewal of lak's key) or none
		wantCode, wantIn           string
	}{
		{"ok/the current LAK", "lak", "lak", "", "lak_mismatch", ""},
		{"ok/the renewed LAK during its handover", "renewed", "renewed", "lak", "lak_mismatch", ""},
		{"ok/the LAK a renewal replaced, during its handover", "lak", "renewed", "lak", "lak_mismatch", ""},
		{"refuse/the LAK a renewal replaced, after its handover", "lak", "renewed", "", "lak_replaced",
			"was replaced by a renewal (lak_serial renewed)"},
		{"refuse/a handover's previous LAK on a device with no current LAK", "lak", "", "lak", "lak_not_current", "(lak_serial none)"},
		{"refuse/a wiped device: no LAK at all", "lak", "", "", "lak_not_current", "is not node-a's current LAK (lak_serial none)"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			b := newBootChecks(t)
			certs := map[string]*pki.Certificate{"lak": b.lak, "renewed": b.renewed}
			serial := func(which string) string {
				if c := certs[which]; c != nil {
					return c.SerialHex()
				}
				return ""
			}
			ref, err := checkBeforeQuote(t, b, func(_ attest.BootNonce, d *fleet.Device, in *fleet.BootCheckInput) {
				in.LAKChain = certs[r.present].DER()
				d.Owned.LAKSerial, d.Owned.LAKSerialPrevious = serial(r.current), serial(r.previous)
				if c := certs[r.current]; c != nil {
					d.Owned.Identity.LAK.Chain = c.DER()
				}
			})
			want := strings.ReplaceAll(r.wantIn, "lak_serial renewed", "lak_serial "+b.renewed.SerialHex())
			if ref == nil || ref.Code != r.wantCode || !strings.Contains(err.Error(), want) {
				t.Fatalf("BootCheck: %v; want refused %s, saying %q", err, r.wantCode, want)
			}
		})
	}
}

// TestBootCheckReadsTheDeviceOnce: a device's first check finds it by the name its LAK
// certificate gives (a list query on NetBox) and reads it; its next checks read it by the id
// found, without its MACs, once — the read's version makes the check's write conditional, so no
// second read is needed. A device renamed since is looked up by name again (docs/boot-checks.md).
func TestBootCheckReadsTheDeviceOnce(t *testing.T) {
	b := newBootChecks(t)
	check := func() {
		t.Helper()
		if ref, err := checkBeforeQuote(t, b, func(attest.BootNonce, *fleet.Device, *fleet.BootCheckInput) {}); ref == nil || ref.Code != "lak_mismatch" {
			t.Fatalf("BootCheck: %v, want lak_mismatch (every check before the quote passed)", err)
		}
	}
	for _, step := range []struct {
		name   string
		before func()
		want   [3]int32 // reads by name, by id without MACs, full, after the step
	}{
		{"ok/the first check looks the device up by name and reads it", func() {}, [3]int32{1, 0, 1}},
		{"ok/the second reads it by id, once", func() {}, [3]int32{1, 1, 1}},
		{"ok/the third too", func() {}, [3]int32{1, 2, 1}},
		{"ok/a device renamed since is looked up by name again", func() {
			d := b.inv.Get(12)
			d.Name = "node-z"
			b.inv.Set(d)
			d2 := fleettest.Declared(13, "node-a") // another device took the name
			d2.Status, d2.Owned = d.Status, d.Owned
			b.inv.Set(d2)
		}, [3]int32{2, 3, 2}},
	} {
		step.before()
		if step.name == "ok/a device renamed since is looked up by name again" {
			n, _, err := b.BootChecks.BootCheckNonce()
			if err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Second)
			if _, _, err := b.BootChecks.BootCheck(context.Background(), fleet.BootCheckInput{Token: n.Token, LAKChain: b.lak.DER()}); err == nil {
				t.Fatal("a check of the renamed device's LAK on the name's new device passed")
			}
		} else {
			check()
		}
		if got := b.reads.counts(); got != step.want {
			t.Errorf("%s: reads by name, by id, full: %v, want %v", step.name, got, step.want)
		}
	}
}

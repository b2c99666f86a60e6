package handlers_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"math"
	mrand "math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/benchcpu"
	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/webhook"
)

// The server-side cost of one boot check (docs/boot-checks.md, "Cost"). The TPM simulator, booted from the RHEL 8
// log (82 events, SHA-1 and SHA-256 banks, so two quotes) and enrolled through the real agent,
// produces one check; every iteration then verifies that same check again. To accept it more
// than once, the services under benchmark run on a clock frozen before the nonce's issue time,
// so last_boot_check never catches up with it.
//
//	go test -run '^$' -bench BootCheck -benchmem ./handlers

type bootBench struct {
	f      *fleetdUnderTest
	ch     channel // the node's TPM
	dir    string  // its node directory
	req    api.BootCheckRequest
	device fleet.Device // node-a as NetBox holds it after its first accepted check
	issued time.Time    // the nonce's issue time
}

func newBootBench(b *testing.B) *bootBench {
	sim, ch := simulatorBoot(b)
	b.Cleanup(func() { sim.Close() })
	f, dir := enrollActive(b, catalog(fleet.SecureBootRequired), simulatorEK(b, ch), agent.EnrollConfig{Channel: ch})
	if err := agent.BootCheck(b.Context(), agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: f.url}, Dir: dir, Channel: ch, Log: zerolog.Nop()}); err != nil {
		b.Fatal(err)
	}
	bb := &bootBench{f: f, ch: ch, dir: dir, device: f.inv.Get(12), req: node{ch: ch, dir: dir, url: f.url}.request(b)}
	n, err := nonces().Open(bb.req.Token)
	if err != nil {
		b.Fatal(err)
	}
	bb.issued = n.IssuedAt
	return bb
}

// newLAKVerifier is a LAK verifier of the fleetd under test, with nothing cached.
func newLAKVerifier(bb *bootBench) *attest.LAKVerifier {
	v, _ := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: bb.f.cas[1].Cert, Above: bb.f.cas[1].Above, Now: time.Now})
	return v
}

// nonces opens the tokens of the fleetd under test (newFleetd seals with the zero key).
func nonces() *attest.BootNonceSealer {
	s, _ := attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: make([]byte, 32), Lifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	return s
}

// BenchmarkBootCheckVerify is fleetd's verification of one check, NetBox and HTTP excluded: the
// nonce token, the LAK certificate, the AK, both quotes, the event log replay, Secure Boot, and
// the comparison with the stored baseline. repeated is a node's hourly check of the same boot
// (its LAK chain and its replayed log cached by the first); first is a check of a boot fleetd has
// not seen (every cache empty: a new LAK verifier and boot cache each time, and the stored
// baseline compared event by event).
func BenchmarkBootCheckVerify(b *testing.B) {
	bb := newBootBench(b)
	sealer := nonces()
	check := func(b *testing.B, lakv *attest.LAKVerifier, boots *attest.BootCache, stored string) {
		pp, err := bb.req.Platform.Attest()
		if err != nil {
			b.Fatal(err)
		}
		n, err := sealer.Open(bb.req.Token)
		if err != nil {
			b.Fatal(err)
		}
		lak, err := lakv.Verify(bb.req.LAKChain)
		if err != nil {
			b.Fatal(err)
		}
		ak, err := lak.AK(pp.Public)
		if err != nil {
			b.Fatal(err)
		}
		boot, err := boots.VerifyPlatform(lak.Device, stored, ak, n.Nonce, pp)
		if err != nil {
			b.Fatal(err)
		}
		if err := attest.RequireSecureBoot(boot, true); err != nil {
			b.Fatal(err)
		}
		if stored == boot.BaselineText {
			return
		}
		base, err := attest.ParseBaseline(stored)
		if err != nil || len(attest.DiffBaseline(base, boot.Baseline())) != 0 {
			b.Fatalf("baseline: %v", err)
		}
	}
	b.Run("repeated", func(b *testing.B) {
		lakv, boots := newLAKVerifier(bb), attest.NewBootCache(16)
		check(b, lakv, boots, bb.device.Owned.BootBaseline)
		defer benchcpu.Start(b)()
		for b.Loop() {
			check(b, lakv, boots, bb.device.Owned.BootBaseline)
		}
	})
	b.Run("first", func(b *testing.B) {
		stored := bb.device.Owned.BootBaseline + "\n" // the same baseline, in another text
		defer benchcpu.Start(b)()
		for b.Loop() {
			check(b, newLAKVerifier(bb), attest.NewBootCache(16), stored)
		}
	})
}

// BenchmarkBootCheckSteps splits BenchmarkBootCheckVerify by step.
func BenchmarkBootCheckSteps(b *testing.B) {
	bb := newBootBench(b)
	lakv, _ := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: bb.f.cas[1].Cert, Above: bb.f.cas[1].Above, Now: time.Now})
	sealer := nonces()
	pp, _ := bb.req.Platform.Attest()
	n, _ := sealer.Open(bb.req.Token)
	lak, _ := lakv.Verify(bb.req.LAKChain)
	ak, _ := lak.AK(pp.Public)
	boot, err := attest.VerifyPlatform(ak, n.Nonce, pp)
	if err != nil {
		b.Fatal(err)
	}
	cached, boots := newLAKVerifier(bb), attest.NewBootCache(16)
	if _, err := cached.Verify(bb.req.LAKChain); err != nil {
		b.Fatal(err)
	}
	if _, err := boots.VerifyPlatform("node-a", bb.device.Owned.BootBaseline, ak, n.Nonce, pp); err != nil {
		b.Fatal(err)
	}
	steps := []struct {
		name string
		f    func() error
	}{
		{"nonce-token", func() error { _, err := sealer.Open(bb.req.Token); return err }},
		{"lak-certificate", func() error { _, err := newLAKVerifier(bb).Verify(bb.req.LAKChain); return err }},
		{"lak-certificate-cached", func() error { _, err := cached.Verify(bb.req.LAKChain); return err }},
		{"quotes+replay+secureboot+baseline", func() error { _, err := attest.VerifyPlatform(ak, n.Nonce, pp); return err }},
		{"quotes+cached-replay", func() error {
			_, err := boots.VerifyPlatform("node-a", bb.device.Owned.BootBaseline, ak, n.Nonce, pp)
			return err
		}},
		{"baseline-compare", func() error {
			base, err := attest.ParseBaseline(bb.device.Owned.BootBaseline)
			_ = attest.DiffBaseline(base, boot.Baseline())
			return err
		}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				if err := s.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBootCheckFloor is the least any verifier must do for the same check: one RSA
// signature verification of the SHA-256 quote and one SHA-256 over the event log.
func BenchmarkBootCheckFloor(b *testing.B) {
	bb := newBootBench(b)
	leaf, err := x509.ParseCertificate(bb.req.LAKChain[0])
	if err != nil {
		b.Fatal(err)
	}
	pub := leaf.PublicKey.(*rsa.PublicKey)
	var q api.Quote
	for _, c := range bb.req.Platform.Quotes {
		if att, err := tpm2.DecodeAttestationData(c.Quote); err == nil && att.AttestedQuoteInfo.PCRSelection.Hash == tpm2.AlgSHA256 {
			q = c
		}
	}
	sig, err := tpm2.DecodeSignature(bytes.NewBuffer(q.Signature))
	if err != nil {
		b.Fatal(err)
	}
	defer benchcpu.Start(b)()
	for b.Loop() {
		digest := sha256.Sum256(q.Quote)
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig.RSA.Signature); err != nil {
			b.Fatal(err)
		}
		_ = sha256.Sum256(bb.req.Platform.EventLog)
	}
}

// BenchmarkBootCheckHTTP is one whole check through the handlers and the fleet service:
// in-memory is the cost with NetBox's writes out of the request path (the bound that batching
// them would approach); netbox-emulator is the cost with the real NetBox adapter writing to the
// NetBox emulator over loopback (one read, which carries the ETag, and one conditional PATCH per
// repeated check, and the webhook NetBox sends back for fleetd's own update; the first check,
// which fills what fleetd caches of the node, is not counted).
func BenchmarkBootCheckHTTP(b *testing.B) {
	bb := newBootBench(b)
	frozen := fleettest.NewClock(bb.issued.Add(-time.Second))
	// run checks the same boot repeatedly, as a node does every hour; a first check, untimed,
	// fills what fleetd caches of the node, and warmed (when set) hears that it is done.
	run := func(b *testing.B, inv fleet.NetBox, warmed func()) {
		url := benchService(b, bb.f, inv, frozen)
		body := mustJSON(b, bb.req)
		check := func() {
			resp, err := http.Post(url+api.PathBootCheck, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		check()
		if warmed != nil {
			warmed()
		}
		for b.Loop() {
			check()
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	}
	b.Run("in-memory", func(b *testing.B) {
		d := bb.device
		d.Owned.LastBootCheck = frozen.Now().Add(-time.Hour)
		d.Seal = "" // the inventory seals the edited values as fleetd would have written them
		run(b, fleettest.NewNetBox(d), nil)
	})
	b.Run("netbox-emulator", func(b *testing.B) {
		client, requests, webhooks := benchNetBox(b, bb.device, frozen.Now().Add(-time.Hour))
		var firstRequests, firstHooks int64
		run(b, client, func() { firstRequests, firstHooks = requests.Load(), webhooks() })
		b.ReportMetric(math.Round(float64(requests.Load()-firstRequests)/float64(b.N)*100)/100, "netbox-requests/check")
		b.ReportMetric(math.Round(float64(webhooks()-firstHooks)/float64(b.N)*100)/100, "webhooks/check")
	})
}

// BenchmarkBootCheckRenewal is one whole check through the handlers and the fleet service on the
// in-memory NetBox, the node sending its LDevID certification as `fleetd boot-check` does:
// without-renewal is the hourly check (the certificates not due), with-renewal a check that
// renews both (the LDevID certification verified, two certificates signed, fleet_identity
// rewritten, a journal entry). The device presents its replaced serials every time, so every
// iteration of with-renewal renews again.
func BenchmarkBootCheckRenewal(b *testing.B) {
	bb := newBootBench(b)
	req := bb.withLDevID(b)
	frozen := fleettest.NewClock(bb.issued.Add(-time.Second))
	for _, r := range []struct {
		name   string
		now    func() time.Time // the issuer's clock: before or past the renewal point
		renews bool
	}{
		{"without-renewal", time.Now, false},
		{"with-renewal", func() time.Time { return time.Now().Add(pastRenewalPoint) }, true},
	} {
		b.Run(r.name, func(b *testing.B) {
			d := bb.device
			d.Owned.LastBootCheck = frozen.Now().Add(-time.Hour)
			d.Seal = "" // sealed again by the inventory, as fleetd would have written these values
			iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: bb.f.cas[0], LAK: bb.f.cas[1], LDevIDLifetime: time.Hour, LAKLifetime: time.Hour,
				Rand: rand.Reader, Now: r.now})
			if err != nil {
				b.Fatal(err)
			}
			url := benchServiceWith(b, bb.f, fleettest.NewNetBox(d), frozen, iss)
			body := mustJSON(b, req)
			for b.Loop() {
				resp, err := http.Post(url+api.PathBootCheck, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				var res api.BootCheckResponse
				err = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d: %v", resp.StatusCode, err)
				}
				if renewed := res.Renewal != nil && len(res.Renewal.LDevIDChain) > 0 && len(res.Renewal.LAKChain) > 0; renewed != r.renews {
					b.Fatalf("renewed both: %v, want %v (%+v)", renewed, r.renews, res.Renewal)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
		})
	}
}

// withLDevID is the bench's check with the certification of the node's LDevID key by its AK
// over the same nonce, as `fleetd boot-check` sends it.
func (bb *bootBench) withLDevID(b *testing.B) api.BootCheckRequest {
	b.Helper()
	n, err := nonces().Open(bb.req.Token)
	if err != nil {
		b.Fatal(err)
	}
	tpm, err := agent.OpenTPM(bb.ch)
	if err != nil {
		b.Fatal(err)
	}
	defer tpm.Close()
	read := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join(bb.dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	cert, err := tpm.CertifyLDevID(read(agent.FileLAKBlob), read(agent.FileLDevIDPub), read(agent.FileLDevIDPriv), n.Nonce)
	if err != nil {
		b.Fatal(err)
	}
	req := bb.req
	req.LDevID = &api.BootCheckLDevID{Chain: derChain(b, filepath.Join(bb.dir, agent.FileLDevIDCert)), Certification: api.NewCertification(*cert)}
	return req
}

// benchService is the fleet service and handlers on the given inventory and clock, with the
// attestation parts of the fleetd under test.
func benchService(b *testing.B, f *fleetdUnderTest, inv fleet.NetBox, clock fleet.Clock) string {
	b.Helper()
	return benchServiceWith(b, f, inv, clock, nil)
}

// benchServiceWith is benchService with a certificate issuer, so that checks can renew.
func benchServiceWith(b *testing.B, f *fleetdUnderTest, inv fleet.NetBox, clock fleet.Clock, issuer *pki.Issuer) string {
	b.Helper()
	lakv, _ := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: f.cas[1].Cert, Above: f.cas[1].Above, Now: time.Now})
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore", ServiceUser: fleettest.ServiceUser}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, Installer: fleettest.NewInstaller(),
		Catalog: catalog(fleet.SecureBootRequired), Attest: fleet.Attestation{LAK: lakv, BootNonces: nonces(), Issuer: issuer},
		Clock: clock, Random: rand.Reader, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	intake, _ := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc.Requests})
	h, err := handlers.New(handlers.Deps{Enrollment: svc.Enrollment, Delivery: svc.Delivery, BootChecks: svc.BootChecks, Requests: svc.Requests,
		Review: svc.Review, Views: svc.Views, Webhooks: intake, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("op"), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchNetBox is the NetBox emulator with netbox-webhooks.yaml loaded (its webhooks go to a
// stub that counts them) and node-a as d, and the real adapter on it. webhooks waits for the
// deliveries to finish and counts them.
func benchNetBox(b *testing.B, d fleet.Device, last time.Time) (client *netbox.Client, requests *atomic.Int64, webhooks func() int64) {
	b.Helper()
	emu, err := netboxemu.Start(netboxemu.Config{Rand: mrand.New(mrand.NewSource(1))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = emu.Close() })
	hooks := &atomic.Int64{}
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hooks.Add(1); w.WriteHeader(http.StatusAccepted) }))
	b.Cleanup(stub.Close)
	raw, err := os.ReadFile("../netbox-webhooks.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if err := emu.LoadSchema(raw, stub.URL, "secret"); err != nil {
		b.Fatal(err)
	}
	tok, _ := emu.AddToken(netboxemu.TokenSpec{User: "fleetd"})
	_, err = emu.AddDevice(netboxemu.DeviceSpec{Name: d.Name, Status: "active", PrimaryIPv4: d.Address.String(),
		Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{string(d.PrimaryMAC())}}},
		CustomFields: map[string]any{"fleet_class": d.Declared.Class, "disk_serial": d.Declared.DiskSerial, "tpm": "2.0",
			"ek_sha256": strings.Join(d.Declared.EKHashes, ","), "fleet_state": "active", "lak_serial": d.Owned.LAKSerial,
			"ldevid_serial": d.Owned.LDevIDSerial, "boot_baseline": d.Owned.BootBaseline, "boot_check": "ok",
			"last_boot_check": last.Format(time.RFC3339Nano)}})
	if err != nil {
		b.Fatal(err)
	}
	requests = &atomic.Int64{}
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		requests.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	client, err = netbox.New(netbox.Config{URL: emu.URL(), Token: tok, HTTPClient: counting, Logger: zerolog.Nop(), Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	return client, requests, func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = emu.WaitIdle(ctx)
		return hooks.Load()
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func mustJSON(b *testing.B, v any) []byte {
	b.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

package spire_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/benchcpu"
	"github.com/folly-infra/fleetd/pki"
)

// fleetd's server side of the enrollment of the same machine, and go-attestation's bare calls on
// its evidence (see bench_spire_test.go for SPIRE's). The agent's two requests are recorded
// during a real enrollment on the swtpm and replayed without the TPM: the evidence round trip
// needs nothing from the replayed challenge, because the recorded token carries the secret and
// nonce the TPM answered, so the recorded evidence verifies every time.

// exchange is the recorded enrollment, decoded.
type exchange struct {
	m         *enrolled
	challenge api.ChallengeRequest
	evidence  api.EvidenceRequest
	platform  ga.PlatformParameters
}

func recordExchange(b *testing.B) *exchange {
	b.Helper()
	x := &exchange{m: enroll(b)}
	must(b, json.Unmarshal(x.m.fleetd.recorded(api.PathAttestChallenge), &x.challenge))
	must(b, json.Unmarshal(x.m.fleetd.recorded(api.PathAttestEvidence), &x.evidence))
	var err error
	x.platform, err = x.evidence.Platform.Attest()
	must(b, err)
	return x
}

// BenchmarkFleetdEnrollmentServer is one whole enrollment as fleetd serves it: both round trips
// through the handlers, the fleet service, attest/ and pki/, ending with the LDevID and LAK
// issued and the in-memory NetBox updated. The device is reset to its pending request first.
func BenchmarkFleetdEnrollmentServer(b *testing.B) {
	x := recordExchange(b)
	f := x.m.fleetd
	bodies := []struct {
		path string
		body []byte
	}{{api.PathAttestChallenge, f.recorded(api.PathAttestChallenge)}, {api.PathAttestEvidence, f.recorded(api.PathAttestEvidence)}}
	defer benchcpu.Start(b)()
	for b.Loop() {
		f.inv.Set(f.device)
		for _, r := range bodies {
			req := httptest.NewRequest(http.MethodPost, r.path, bytes.NewReader(r.body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("%s: %d %s", r.path, w.Code, w.Body)
			}
		}
	}
}

// BenchmarkFleetdEnrollmentSteps splits fleetd's checks of the same evidence by step, calling
// attest/ and pki/ directly, through the two certificates every enrollment issues (the LDevID
// and the LAK).
func BenchmarkFleetdEnrollmentSteps(b *testing.B) {
	x := recordExchange(b)
	f, ch, ev := x.m.fleetd, x.challenge, x.evidence
	hashes := f.device.Declared.EKHashes
	binding := attest.Binding{DeviceID: deviceID, Device: deviceName, ApprovedEKs: hashes, ClaimedAKPublic: x.platform.Public}
	ek, err := f.ek.Verify(ch.EK.Public, ch.EK.Certificate, attest.EKApproval{SHA256: hashes})
	must(b, err)
	tok, err := f.tokens.Open(ev.Token, binding)
	must(b, err)
	ak, err := attest.VerifyActivation(tok, ev.Secret, x.platform.Public)
	must(b, err)
	nonce := tok.Claims().Nonce
	key, err := attest.VerifyLDevIDKey(ak, nonce, ev.LDevID.Attest())
	must(b, err)
	id := pki.Identity{DeviceName: deviceName, DeviceSerial: "SN-1", HWSerialNum: tok.Claims().HWSerialNum}
	runSteps(b, []step{
		{"ek-hash+cert", func() error {
			_, err := f.ek.Verify(ch.EK.Public, ch.EK.Certificate, attest.EKApproval{SHA256: hashes})
			return err
		}},
		{"ak-challenge", func() error { _, err := attest.NewAKChallenge(ek, ch.AK.Attest(), rand.Reader); return err }},
		{"token-seal+open+activation", func() error {
			sealed, err := f.tokens.Seal(tok.Claims())
			if err != nil {
				return err
			}
			t, err := f.tokens.Open(sealed, binding)
			if err == nil {
				_, err = attest.VerifyActivation(t, ev.Secret, x.platform.Public)
			}
			return err
		}},
		{"platform", func() error { _, err := attest.VerifyPlatform(ak, nonce, x.platform); return err }},
		{"ldevid-key", func() error { _, err := attest.VerifyLDevIDKey(ak, nonce, ev.LDevID.Attest()); return err }},
		{"issue-ldevid", func() error { _, err := f.issuer.IssueLDevID(id, key.Public); return err }},
		{"issue-lak", func() error { _, err := f.issuer.IssueLAK(id, ak.Public); return err }},
	})
}

// BenchmarkGoAttestationBare is go-attestation's own verification calls on the same evidence,
// without fleetd's additions.
func BenchmarkGoAttestationBare(b *testing.B) {
	x := recordExchange(b)
	ekPub, err := x509.ParsePKIXPublicKey(x.challenge.EK.Public)
	must(b, err)
	pp := x.platform
	nonce := x.m.fleetd.nonce(b, x.evidence.Token, pp.Public)
	cert := x.evidence.LDevID.Attest()
	runSteps(b, []step{
		{"activation-generate", func() error {
			_, _, err := (&ga.ActivationParameters{EK: ekPub, AK: x.challenge.AK.Attest(), Rand: rand.Reader}).Generate()
			return err
		}},
		{"quote-verify", func() error {
			pub, err := ga.ParseAKPublic(pp.Public)
			if err == nil {
				err = pub.VerifyAll(pp.Quotes, append([]ga.PCR(nil), pp.PCRs...), nonce)
			}
			return err
		}},
		{"eventlog-verify+secureboot", func() error {
			pub, err := ga.ParseAKPublic(pp.Public)
			if err != nil {
				return err
			}
			pcrs := append([]ga.PCR(nil), pp.PCRs...)
			if err := pub.VerifyAll(pp.Quotes, pcrs, nonce); err != nil {
				return err
			}
			el, err := ga.ParseEventLog(pp.EventLog)
			if err != nil {
				return err
			}
			events, err := el.Verify(pcrs)
			if err == nil {
				_, err = ga.ParseSecurebootState(events)
			}
			return err
		}},
		{"certification-verify", func() error {
			pub, err := ga.ParseAKPublic(pp.Public)
			if err != nil {
				return err
			}
			return cert.Verify(ga.VerifyOpts{Public: pub.Public, Hash: crypto.SHA256})
		}},
	})
}

// nonce is the nonce fleetd sealed into the recorded token: what the quotes carry.
func (f *fleetd) nonce(b *testing.B, token string, akPublic []byte) []byte {
	b.Helper()
	tok, err := f.tokens.Open(token, attest.Binding{DeviceID: deviceID, Device: deviceName, ApprovedEKs: f.device.Declared.EKHashes, ClaimedAKPublic: akPublic})
	must(b, err)
	return tok.Claims().Nonce
}

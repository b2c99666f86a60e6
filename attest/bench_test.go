package attest_test

import (
	"crypto"
	"crypto/x509"
	"testing"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/benchcpu"
	"github.com/folly-infra/fleetd/pki"
)

// The server-side cost of one enrollment, TPM excluded: a swtpm (RSA EK with certificate,
// sha256 bank, the RHEL 8 log replayed) produces the evidence once, against the real fleetd
// (handlers and service on in-memory NetBox, verifier_test.go); each iteration then sends both
// round trips again.
//
//	go test -run '^$' -bench . -benchmem ./attest

func benchScenario(b *testing.B) *scenario {
	b.Helper()
	m := swtpmMachine(b, eventlogs.RHEL8SecureBoot)
	v := newVerifier(b, attest.EKPolicyHashCert, swtpmBundle(b))
	return newScenario(b, m, v, true)
}

// BenchmarkEnrollmentServer is fleetd's whole handling of one provision's enrollment over HTTP:
// a challenge (its answer unused: the evidence is the one the TPM made in setup, whose token
// stays valid), then the evidence verified, both certificates issued, the Talos configuration
// rendered and validated and the attestation recorded; node-a is put back pending after each.
func BenchmarkEnrollmentServer(b *testing.B) {
	s := benchScenario(b)
	pending := s.v.f.Inv.Get(idNodeA)
	b.ResetTimer()
	defer benchcpu.Start(b)()
	for b.Loop() {
		if _, err := s.v.challenge(s.c1); err != nil {
			b.Fatal(err)
		}
		if _, err := s.v.evidence(s.c2); err != nil {
			b.Fatal(err)
		}
		s.v.f.Inv.Set(pending)
	}
}

// BenchmarkEnrollmentSteps splits the same work by step.
func BenchmarkEnrollmentSteps(b *testing.B) {
	s := benchScenario(b)
	d, parts := s.v.f.Inv.Get(idNodeA), s.v.f.Attest
	binding := attest.Binding{DeviceID: d.ID, Device: d.Name, ApprovedEKs: d.Declared.EKHashes, ClaimedAKPublic: s.c2.platform.Public}
	ek, err := parts.EK.Verify(s.c1.ekPub, s.c1.ekCert, attest.EKApproval{SHA256: d.Declared.EKHashes})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := parts.Tokens.Open(s.c2.token, binding)
	if err != nil {
		b.Fatal(err)
	}
	ak, err := attest.VerifyActivation(tok, s.c2.secret, s.c2.platform.Public)
	if err != nil {
		b.Fatal(err)
	}
	key, err := attest.VerifyLDevIDKey(ak, s.a1.nonce, s.c2.ldevid)
	if err != nil {
		b.Fatal(err)
	}
	boot, err := attest.VerifyPlatform(ak, s.a1.nonce, s.c2.platform)
	if err != nil {
		b.Fatal(err)
	}
	learned, err := attest.LearnBoot(s.c2.platform.EventLog)
	if err != nil {
		b.Fatal(err)
	}
	var pf attest.BootPolicyFile
	pf.Learn("", "bench", learned)
	policy := policyOf(b, pf)
	steps := map[string]func() error{
		"boot-policy": func() error { return policy.Check(boot, "talos-worker") },
		"ek-hash+cert": func() error {
			_, err := parts.EK.Verify(s.c1.ekPub, s.c1.ekCert, attest.EKApproval{SHA256: d.Declared.EKHashes})
			return err
		},
		"ak-challenge": func() error { _, err := attest.NewAKChallenge(ek, s.c1.ak, seeded(1)); return err },
		"token-seal+open": func() error {
			t, err := parts.Tokens.Seal(tok.Claims())
			if err == nil {
				_, err = parts.Tokens.Open(t, binding)
			}
			return err
		},
		"platform": func() error { _, err := attest.VerifyPlatform(ak, s.a1.nonce, s.c2.platform); return err },
		"ldevid":   func() error { _, err := attest.VerifyLDevIDKey(ak, s.a1.nonce, s.c2.ldevid); return err },
		"issue-two-certs": func() error {
			if _, err := parts.Issuer.IssueLDevID(idFor(tok), key.Public); err != nil {
				return err
			}
			_, err := parts.Issuer.IssueLAK(idFor(tok), ak.Public)
			return err
		},
	}
	for name, f := range steps {
		b.Run(name, func(b *testing.B) {
			defer benchcpu.Start(b)()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGoAttestationBare is go-attestation's own verification calls on the same evidence,
// without fleetd's additions, so their overhead shows against BenchmarkEnrollmentSteps.
func BenchmarkGoAttestationBare(b *testing.B) {
	s := benchScenario(b)
	ekPub, err := x509.ParsePKIXPublicKey(s.c1.ekPub)
	if err != nil {
		b.Fatal(err)
	}
	nonce := s.a1.nonce
	pp := s.c2.platform
	steps := map[string]func() error{
		"activation-generate": func() error {
			_, _, err := (&ga.ActivationParameters{EK: ekPub, AK: s.c1.ak, Rand: seeded(1)}).Generate()
			return err
		},
		"quote-verify": func() error {
			pub, err := ga.ParseAKPublic(pp.Public)
			if err == nil {
				err = pub.VerifyAll(pp.Quotes, clonePCRs(pp.PCRs), nonce)
			}
			return err
		},
		"eventlog-verify+secureboot": func() error {
			pub, _ := ga.ParseAKPublic(pp.Public)
			pcrs := clonePCRs(pp.PCRs)
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
		},
		"certification-verify": func() error {
			pub, _ := ga.ParseAKPublic(pp.Public)
			return s.c2.ldevid.Verify(ga.VerifyOpts{Public: pub.Public, Hash: crypto.SHA256})
		},
	}
	for name, f := range steps {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func idFor(tok *attest.Token) pki.Identity {
	return pki.Identity{DeviceName: tok.Claims().Device, DeviceSerial: "SN-1", HWSerialNum: tok.Claims().HWSerialNum}
}

func clonePCRs(p []ga.PCR) []ga.PCR { return append([]ga.PCR(nil), p...) }

// BenchmarkReceiptVerify is fleetd's whole check of one wipe receipt, TPM excluded: the receipt
// token opened, then the receipt verified (the quote under the token's AK by go-attestation, the
// extraData, the PCRs, the TPM's counts, the report). A swtpm attests the wipe and quotes the
// receipt once in setup. It reports the token's size, which the evidence answer and the receipt
// carry.
func BenchmarkReceiptVerify(b *testing.B) {
	m := swtpmMachine(b, eventlogs.Ubuntu2104NoSecureBoot)
	c := &clock{testTime}
	w := attestWipe(b, m, c, newReceiptSealer(b, c, 1), receiptRequest)
	claim := attest.ClaimedReceipt{Device: "node-a", Request: receiptRequest, Report: erased(),
		Quote: quote(b, m, w.akBlob, w.ticket.Nonce, erased())}
	b.ResetTimer()
	defer benchcpu.Start(b)()
	for b.Loop() {
		if _, err := presentReceipt(w.sealer, w.ticket.Token, claim); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(w.ticket.Token)), "token-bytes")
}

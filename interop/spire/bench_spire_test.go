package spire_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/spire/pkg/agent/plugin/nodeattestor/tpmdevid/tpmutil"
	devid "github.com/spiffe/spire/pkg/common/plugin/tpmdevid"
	serverdevid "github.com/spiffe/spire/pkg/server/plugin/nodeattestor/tpmdevid"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/dev/benchcpu"
	"github.com/folly-infra/fleetd/pki"
)

// SPIRE's tpm_devid attestation of the machine fleetd enrolled (the swtpm, fleetd's LDevID), per
// attestation, next to fleetd's server side of the enrollment of the same machine and
// go-attestation's bare calls (bench_fleetd_test.go).
//
//	cd interop/spire && go test -run '^$' -bench . -benchmem ./...
//
// SPIRE's exchange interleaves the agent's TPM work with the server's checks: the server plugin's
// challenge function is where the agent signs the DevID nonce and activates the credential on
// its TPM. BenchmarkSPIREServerAttest stops the benchmark timer around that function, so its
// ns/op, B/op and allocs/op are the server's alone: the plugin's checks, its JSON, and the gRPC
// hops between SPIRE's plugin host and the built-in plugin; tpm-ns/op is the stopped part. The
// agent's payload is made once, by a SPIRE agent session on the swtpm that stays open, so its AK
// can answer every iteration's fresh challenge.

// spireSession is SPIRE's agent side held open on the swtpm, with the payload it sent.
type spireSession struct {
	s       *tpmutil.Session
	req     devid.AttestationRequest
	payload []byte
}

// newSPIRESession opens SPIRE's agent session (tpmutil.NewSession: the SRK from SPIRE's
// template, fleetd's LDevID loaded under it, a fresh AK, the EK) and makes the payload SPIRE's
// agent plugin sends.
func newSPIRESession(b *testing.B, m *enrolled) *spireSession {
	b.Helper()
	useSwtpm(b)
	pub, err := os.ReadFile(m.file(agent.FileLDevIDPub))
	must(b, err)
	priv, err := os.ReadFile(m.file(agent.FileLDevIDPriv))
	must(b, err)
	s, err := tpmutil.NewSession(&tpmutil.SessionConfig{DevicePath: m.tpm.Spec(), DevIDPub: pub, DevIDPriv: priv, Log: hclog.NewNullLogger()})
	must(b, err)
	b.Cleanup(s.Close)
	written, err := os.ReadFile(m.file(agent.FileLDevIDCert))
	must(b, err)
	certs, err := pki.ParseCertificatesPEM(written)
	must(b, err)
	req := devid.AttestationRequest{DevIDPub: pub, AKPub: s.GetAKPublic()}
	for _, c := range certs {
		req.DevIDCert = append(req.DevIDCert, c.Raw)
	}
	if req.EKCert, err = s.GetEKCert(); err != nil {
		b.Fatal(err)
	}
	if req.EKPub, err = s.GetEKPublic(); err != nil {
		b.Fatal(err)
	}
	if req.CertifiedDevID, req.CertificationSignature, err = s.CertifyDevIDKey(); err != nil {
		b.Fatal(err)
	}
	payload, err := json.Marshal(req)
	must(b, err)
	return &spireSession{s: s, req: req, payload: payload}
}

// solve answers the server's challenges as SPIRE's agent plugin does.
func (s *spireSession) solve(challenge []byte) ([]byte, error) {
	var c devid.ChallengeRequest
	if err := json.Unmarshal(challenge, &c); err != nil {
		return nil, err
	}
	sig, err := s.s.SolveDevIDChallenge(c.DevID)
	if err != nil {
		return nil, err
	}
	secret, err := s.s.SolveCredActivationChallenge(c.CredActivation.Credential, c.CredActivation.Secret)
	if err != nil {
		return nil, err
	}
	return json.Marshal(devid.ChallengeResponse{DevID: sig, CredActivation: secret})
}

// BenchmarkSPIREServerAttest is SPIRE's server plugin attesting the machine, TPM time excluded.
func BenchmarkSPIREServerAttest(b *testing.B) {
	m := enroll(b)
	s := newSPIRESession(b, m)
	server := spireServer(b, m.fleetd.ldevidCAFiles.Root, writeTemp(b, "ek-ca.pem", ekCA.BundlePEM()))
	var inTPM time.Duration
	challenge := func(_ context.Context, c []byte) ([]byte, error) {
		b.StopTimer()
		start := time.Now()
		defer func() { inTPM += time.Since(start); b.StartTimer() }()
		return s.solve(c)
	}
	for b.Loop() {
		if _, err := server.Attest(context.Background(), s.payload, challenge); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(inTPM.Nanoseconds())/float64(b.N), "tpm-ns/op")
}

// BenchmarkSPIREServerSteps splits the server's work on the same payload: the two chain checks
// (Go's x509 with the options SPIRE's unexported functions use), and SPIRE's exported checks.
func BenchmarkSPIREServerSteps(b *testing.B) {
	m := enroll(b)
	s := newSPIRESession(b, m)
	r := s.req
	leaf, err := x509.ParseCertificate(r.DevIDCert[0])
	must(b, err)
	inter := x509.NewCertPool()
	for _, der := range r.DevIDCert[1:] {
		c, err := x509.ParseCertificate(der)
		must(b, err)
		inter.AddCert(c)
	}
	devIDRoots := m.fleetd.ldevidCA.Roots()
	ekCert, err := x509.ParseCertificate(r.EKCert)
	must(b, err)
	akPub, devIDPub, ekPub := decodePublic(b, r.AKPub), decodePublic(b, r.DevIDPub), decodePublic(b, r.EKPub)
	nonce := make([]byte, 32)
	_, _ = rand.Read(nonce)
	sig, err := s.s.SolveDevIDChallenge(nonce)
	must(b, err)
	runSteps(b, []step{
		{"devid-chain", func() error {
			_, err := leaf.Verify(x509.VerifyOptions{Roots: devIDRoots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		}},
		{"ek-chain", func() error {
			c := *ekCert
			c.UnhandledCriticalExtensions = withoutSAN(c.UnhandledCriticalExtensions)
			_, err := c.Verify(x509.VerifyOptions{Roots: ekCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		}},
		{"devid-certification", func() error {
			return serverdevid.VerifyDevIDCertification(&akPub, &devIDPub, r.CertifiedDevID, r.CertificationSignature)
		}},
		{"credactivation-challenge", func() error { _, _, err := serverdevid.NewCredActivationChallenge(akPub, ekPub); return err }},
		{"devid-challenge-verify", func() error { return serverdevid.VerifyDevIDChallenge(leaf, nonce, sig) }},
	})
}

// BenchmarkSPIREExchangeSwtpm is one whole node attestation, agent included: SPIRE's agent
// plugin opens its session on the swtpm (SRK, LDevID load, a fresh RSA AK, EK), certifies the
// LDevID and answers the server plugin's challenges. The swtpm's RSA key generation dominates.
func BenchmarkSPIREExchangeSwtpm(b *testing.B) {
	m := enroll(b)
	server := spireServer(b, m.fleetd.ldevidCAFiles.Root, writeTemp(b, "ek-ca.pem", ekCA.BundlePEM()))
	a := spireAgent(b, m.file(agent.FileLDevIDCert), m.file(agent.FileLDevIDPub), m.file(agent.FileLDevIDPriv), m.tpm.Spec())
	for b.Loop() {
		if _, err := attestNode(context.Background(), a, server); err != nil {
			b.Fatal(err)
		}
	}
}

func decodePublic(b *testing.B, blob []byte) tpm2.Public {
	b.Helper()
	p, err := tpm2.DecodePublic(blob)
	must(b, err)
	return p
}

// withoutSAN drops the subjectAltName from a certificate's unhandled critical extensions, as
// SPIRE (and fleetd) do for TCG EK certificates.
func withoutSAN(oids []asn1.ObjectIdentifier) []asn1.ObjectIdentifier {
	var out []asn1.ObjectIdentifier
	for _, o := range oids {
		if !o.Equal(pki.OIDSubjectAltName) {
			out = append(out, o)
		}
	}
	return out
}

// step is one named piece of verification work.
type step struct {
	name string
	f    func() error
}

func runSteps(b *testing.B, steps []step) {
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			defer benchcpu.Start(b)()
			for b.Loop() {
				if err := s.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

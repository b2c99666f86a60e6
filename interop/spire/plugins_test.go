package spire_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	agentna "github.com/spiffe/spire/pkg/agent/plugin/nodeattestor"
	agentdevid "github.com/spiffe/spire/pkg/agent/plugin/nodeattestor/tpmdevid"
	"github.com/spiffe/spire/pkg/agent/plugin/nodeattestor/tpmdevid/tpmutil"
	"github.com/spiffe/spire/pkg/common/catalog"
	serverna "github.com/spiffe/spire/pkg/server/plugin/nodeattestor"
	serverdevid "github.com/spiffe/spire/pkg/server/plugin/nodeattestor/tpmdevid"

	"github.com/folly-infra/fleetd/agent/tpmconn"
)

const trustDomain = "example.org"

// loadPlugin loads a SPIRE built-in plugin through SPIRE's catalog, as spire-server and
// spire-agent load their built-ins (plugin and host talk gRPC over an in-memory pipe), binds it
// to facade and configures it with hcl. SPIRE's test/plugintest.Load does the same but takes a
// *testing.T, which a benchmark does not have.
func loadPlugin(tb testing.TB, builtIn catalog.BuiltIn, facade catalog.Facade, hcl string) {
	tb.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	p, err := catalog.LoadBuiltIn(context.Background(), builtIn, catalog.BuiltInConfig{Log: log})
	must(tb, err)
	tb.Cleanup(func() { _ = p.Close() })
	cfg, err := p.Bind(facade)
	must(tb, err)
	td := spiffeid.RequireTrustDomainFromString(trustDomain)
	if err := cfg.Configure(context.Background(), catalog.CoreConfig{TrustDomain: td}, hcl); err != nil {
		tb.Fatalf("configure SPIRE's %s plugin: %v", builtIn.Name, err)
	}
}

// spireServer is SPIRE's tpm_devid server plugin trusting LDevIDs under devIDCA and EK
// certificates issued by a CA in ekCA (PEM bundle files, as in server.conf).
func spireServer(tb testing.TB, devIDCA, ekCA string) *serverna.V1 {
	tb.Helper()
	v1 := new(serverna.V1)
	loadPlugin(tb, serverdevid.BuiltIn(), v1, fmt.Sprintf("devid_ca_path = %q\nendorsement_ca_path = %q\n", devIDCA, ekCA))
	return v1
}

// spireAgent is SPIRE's tpm_devid agent plugin reading the DevID files named (as in agent.conf)
// and opening the TPM at tpmPath, a swtpm spec (see useSwtpm).
func spireAgent(tb testing.TB, certPath, pubPath, privPath, tpmPath string) *agentna.V1 {
	tb.Helper()
	useSwtpm(tb)
	v1 := new(agentna.V1)
	loadPlugin(tb, agentdevid.BuiltIn(), v1, fmt.Sprintf("devid_cert_path = %q\ndevid_pub_path = %q\ndevid_priv_path = %q\ntpm_device_path = %q\n",
		certPath, pubPath, privPath, tpmPath))
	return v1
}

// useSwtpm points SPIRE's TPM-opening hook (tpmutil.OpenTPM, the variable SPIRE's own tests
// replace with its simulator) at a swtpm: a tpm_device_path "swtpm:HOST:PORT" opens fleetd's
// framed connection to that swtpm's data channel, any other path fails. The hook is restored
// when the test ends; tests using it must not run in parallel.
func useSwtpm(tb testing.TB) {
	orig := tpmutil.OpenTPM
	tpmutil.OpenTPM = func(paths ...string) (io.ReadWriteCloser, error) {
		addr, ok := strings.CutPrefix(paths[0], tpmconn.SwtpmPrefix)
		if !ok {
			return nil, fmt.Errorf("open TPM %q: this test reaches only swtpm:HOST:PORT", paths[0])
		}
		return tpmconn.DialSwtpm(addr)
	}
	tb.Cleanup(func() { tpmutil.OpenTPM = orig })
}

// attestNode runs one node attestation as a SPIRE agent and server run it over SPIRE's node API:
// the agent plugin sends its payload, the server plugin answers with a challenge, the agent
// plugin its response, until the server plugin accepts (the agent's SPIFFE ID and selectors) or
// refuses (the error).
func attestNode(ctx context.Context, a *agentna.V1, s *serverna.V1) (*serverna.AttestResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &stream{server: s, challenges: make(chan []byte), responses: make(chan []byte), done: make(chan struct{})}
	err := a.Attest(ctx, st)
	cancel()
	if st.started {
		<-st.done
	}
	if err != nil {
		return nil, err
	}
	return st.result, st.err
}

// stream is the agent's agentna.ServerStream, wired to the server plugin's Attest running in
// its own goroutine.
type stream struct {
	server                *serverna.V1
	challenges, responses chan []byte
	done                  chan struct{} // closed when the server's Attest returned
	started               bool
	result                *serverna.AttestResult
	err                   error
}

func (s *stream) SendAttestationData(ctx context.Context, data agentna.AttestationData) ([]byte, error) {
	if data.Type != "tpm_devid" {
		return nil, fmt.Errorf("attestation data of type %q, want tpm_devid", data.Type)
	}
	s.started = true
	go func() {
		defer close(s.done)
		s.result, s.err = s.server.Attest(ctx, data.Payload, s.challenge)
	}()
	return s.next()
}

func (s *stream) SendChallengeResponse(_ context.Context, response []byte) ([]byte, error) {
	select {
	case s.responses <- response:
	case <-s.done:
	}
	return s.next()
}

// next is the server's next challenge, or nil when it ended (with its refusal, if any).
func (s *stream) next() ([]byte, error) {
	select {
	case c := <-s.challenges:
		return c, nil
	case <-s.done:
		return nil, s.err
	}
}

// challenge is the server plugin's challenge function: it hands the challenge to the agent and
// waits for the response.
func (s *stream) challenge(ctx context.Context, c []byte) ([]byte, error) {
	select {
	case s.challenges <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-s.responses:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

package spire_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	agentna "github.com/spiffe/spire/pkg/agent/plugin/nodeattestor"
	serverna "github.com/spiffe/spire/pkg/server/plugin/nodeattestor"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
)

// renewAfter is the renewal point of this test's fleetd: a few real seconds, since SPIRE checks
// certificates against the real clock and the renewed one must be valid now.
const renewAfter = 2 * time.Second

// TestSPIREAttestsRenewedLDevID runs a renewal through the real `fleetd boot-check` on the
// swtpm the node enrolled with, then SPIRE's own tpm_devid plugins on the node's files: SPIRE
// accepts the renewed LDevID (new serial, same TPM key), a configured agent plugin kept across
// the renewal still presents the old one (it read its files at Configure), and a restarted one
// presents the renewed one (docs/enrollment.md, "Renewal"). An LDevID that lapsed is refused by
// the same configured agent that was accepted with it moments before.
func TestSPIREAttestsRenewedLDevID(t *testing.T) {
	m := enrollOn(t, newFleetdWith(t, handlerstest.Config{RenewAfter: renewAfter}))
	d := m.fleetd.inv.Get(deviceID) // the installed node, as a delivered configuration leaves it
	d.Owned.State, d.Status = fleet.StateActive, fleet.StatusActive
	m.fleetd.inv.Set(d)
	server := spireServer(t, m.fleetd.ldevidCAFiles.Root, writeTemp(t, "ek-ca.pem", ekCA.BundlePEM()))
	agentOnFiles := func() *agentna.V1 { // spire-agent started on the node's files
		return spireAgent(t, m.file(agent.FileLDevIDCert), m.file(agent.FileLDevIDPub), m.file(agent.FileLDevIDPriv), m.tpm.Spec())
	}
	first := leafOf(t, m.file(agent.FileLDevIDCert))
	kept := agentOnFiles() // configured once, never restarted

	// ok/the LDevID of the enrollment.
	attestAs(t, kept, server, first, "before the renewal")

	// The renewal: past the renewal point, the node's boot check renews ldevid.pem in place.
	time.Sleep(renewAfter + 500*time.Millisecond)
	err := agent.BootCheck(context.Background(), agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: m.fleetd.url, RetryWait: time.Millisecond},
		TPM: m.tpm.Spec(), EventLog: m.eventLog, Dir: m.workflowDir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("fleetd boot-check: exit %d: %v", agent.ExitCode(err), err)
	}
	renewed := leafOf(t, m.file(agent.FileLDevIDCert))
	if serial(renewed) == serial(first) || m.fleetd.inv.Get(deviceID).Owned.LDevIDSerial != serial(renewed) {
		t.Fatalf("after the boot check ldevid.pem holds %s (was %s), NetBox %s", serial(renewed), serial(first), m.fleetd.inv.Get(deviceID).Owned.LDevIDSerial)
	}
	if !bytes.Equal(renewed.RawSubjectPublicKeyInfo, first.RawSubjectPublicKeyInfo) {
		t.Fatal("the renewed LDevID certifies another key")
	}

	// ok/the agent kept across the renewal still presents what it read at start: the old LDevID.
	attestAs(t, kept, server, first, "the agent kept across the renewal")
	// ok/a restarted agent presents the renewed LDevID: a new agent ID, accepted.
	attestAs(t, agentOnFiles(), server, renewed, "the agent restarted after the renewal")

	// refuse/lapsed: an LDevID of the node's key whose lifetime is a few real seconds is accepted
	// while valid and refused, by the same configured agent, once it lapsed.
	lapsing := issueFor(t, m.fleetd.ldevidCA, renewed, 15*time.Second) // long enough for one attestation on a loaded machine
	short := spireAgent(t, writeTemp(t, "ldevid.pem", lapsing.PEM()), m.file(agent.FileLDevIDPub), m.file(agent.FileLDevIDPriv), m.tpm.Spec())
	attestAs(t, short, server, lapsing.Leaf, "an LDevID that has not lapsed yet")
	time.Sleep(time.Until(lapsing.Leaf.NotAfter) + time.Second)
	if got, err := attestNode(context.Background(), short, server); err == nil || !strings.Contains(err.Error(), "certificate has expired") {
		t.Fatalf("SPIRE's answer to a lapsed LDevID: %v (result %v), want a refusal with \"certificate has expired\"", err, got)
	}
}

// attestAs runs one SPIRE node attestation and checks that it was accepted as the agent of leaf.
func attestAs(t *testing.T, a *agentna.V1, s *serverna.V1, leaf *x509.Certificate, when string) {
	t.Helper()
	got, err := attestNode(context.Background(), a, s)
	if err != nil {
		t.Fatalf("%s: SPIRE refused: %v", when, err)
	}
	if want := "spiffe://" + trustDomain + "/spire/agent/tpm_devid/" + fingerprint(leaf); got.AgentID != want {
		t.Errorf("%s: agent ID %s, want %s (LDevID %s)", when, got.AgentID, want, serial(leaf))
	}
}

// issueFor is an LDevID of lifetime for leaf's key and identity, issued by fleetd's LDevID CA.
func issueFor(t *testing.T, ca *pki.CA, leaf *x509.Certificate, lifetime time.Duration) *pki.Certificate {
	t.Helper()
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: lifetime, LAKLifetime: lifetime, Rand: rand.Reader, Now: time.Now})
	must(t, err)
	id, err := pki.RenewIdentity(leaf.Subject.CommonName, leaf.Subject.SerialNumber, leaf)
	must(t, err)
	c, err := iss.IssueLDevID(id, leaf.PublicKey)
	must(t, err)
	return c
}

func leafOf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	certs, err := pki.ParseCertificatesPEM(raw)
	must(t, err)
	return certs[0]
}

func serial(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }

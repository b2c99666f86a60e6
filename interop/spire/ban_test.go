package spire_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	agentna "github.com/spiffe/spire/pkg/agent/plugin/nodeattestor"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
	fleetdspire "github.com/folly-infra/fleetd/spire"
)

// banned is SPIRE's refusal of a banned agent ID's attestation.
const banned = "failed to attest: agent is banned"

// TestSPIREBan runs a device's SPIRE identity to its end: the node attests with the LDevID of
// its enrollment, renews through `fleetd boot-check` and attests again with the renewed one (two
// agent IDs: tpm_devid names an agent by its certificate), then the owner asks for a wipe and
// fleetd's claim bans the device's agents through fleetd's spire adapter, on SPIRE v1.13.3's own
// server run as `spire-server run` runs it, over its admin socket. Both the previous and the
// current LDevID are refused from then on; device B's agent is not touched. An LDevID of the
// device that SPIRE never saw has no agent to ban: it attests once, as a new agent, and the next
// reconcile pass while the wipe runs bans it (docs/security.md, "SPIRE identity").
func TestSPIREBan(t *testing.T) {
	ctx := context.Background()
	sockDir, err := os.MkdirTemp("", "spire-") // short: a unix socket's path holds at most 107 bytes
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "api.sock")
	late := &lateSPIRE{} // fleetd's adapter, once fleetd's LDevID CA exists
	m := enrollOn(t, newFleetdWith(t, handlerstest.Config{RenewAfter: renewAfter, SPIRE: late}))
	ca := m.fleetd.ldevidCA
	adapter, err := fleetdspire.New(fleetdspire.Config{ServerSocket: socket, IssuerCN: ca.Cert.Subject.CommonName})
	must(t, err)
	t.Cleanup(func() { _ = adapter.Close() })
	late.s = adapter
	d := m.fleetd.inv.Get(deviceID) // the installed node, as a delivered configuration leaves it
	d.Owned.State, d.Status = fleet.StateActive, fleet.StatusActive
	m.fleetd.inv.Set(d)
	server := runSPIREServer(t, socket, m.fleetd.ldevidCAFiles.Root, writeTemp(t, "ek-ca.pem", ekCA.BundlePEM()))
	agentOn := func(certPath string) *agentna.V1 { // spire-agent started on these LDevID files
		return spireAgent(t, certPath, m.file(agent.FileLDevIDPub), m.file(agent.FileLDevIDPriv), m.tpm.Spec())
	}

	// Before the wipe: the enrollment's LDevID, then the renewed one, each an agent of its own.
	previousPEM, err := os.ReadFile(m.file(agent.FileLDevIDCert))
	must(t, err)
	previous := writeTemp(t, "previous.pem", previousPEM)
	attestedAs(t, server, agentOn(previous), leafOf(t, previous), "the enrollment's LDevID")
	time.Sleep(renewAfter + 500*time.Millisecond)
	err = agent.BootCheck(ctx, agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: m.fleetd.url, RetryWait: time.Millisecond},
		TPM: m.tpm.Spec(), EventLog: m.eventLog, Dir: m.workflowDir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("fleetd boot-check: exit %d: %v", agent.ExitCode(err), err)
	}
	current := m.file(agent.FileLDevIDCert)
	if serial(leafOf(t, current)) == serial(leafOf(t, previous)) {
		t.Fatal("the boot check did not renew the LDevID")
	}
	attestedAs(t, server, agentOn(current), leafOf(t, current), "the renewed LDevID")
	// Device B: an LDevID fleetd's CA issued to node-b (on this TPM's key: SPIRE tells agents
	// apart by their certificate, and selects them by its subject).
	nodeB := issueNamed(t, ca, leafOf(t, current), "node-b")
	deviceB := writeTemp(t, "node-b.pem", nodeB.PEM())
	attestedAs(t, server, agentOn(deviceB), nodeB.Leaf, "device B")
	// An LDevID of node-a SPIRE has not seen: the node renewed and its agent not restarted yet.
	unseen := writeTemp(t, "unseen.pem", issueFor(t, ca, leafOf(t, current), time.Hour).PEM())

	// The wipe starts: the owner's desired_action, claimed by fleetd's reconcile.
	d = m.fleetd.inv.Get(deviceID)
	d.Declared.DesiredAction = fleet.ActionWipe
	m.fleetd.inv.Set(d)
	out, err := m.fleetd.service.Requests.Reconcile(ctx, deviceID)
	if err != nil || out.Result != "accepted" || !strings.Contains(out.Detail, "SPIRE: banned 2 agent(s) of node-a") {
		t.Fatalf("the wipe's claim: %+v, %v; want accepted with node-a's two agents banned", out, err)
	}

	for _, r := range []struct {
		name, cert, wantErr string
		leaf                *x509.Certificate
	}{
		{name: "refuse/the previous LDevID, the renewal's predecessor", cert: previous, wantErr: banned},
		{name: "refuse/the current LDevID", cert: current, wantErr: banned},
		{name: "ok/device B's agent is not banned", cert: deviceB, leaf: nodeB.Leaf},
		{name: "ok/an LDevID SPIRE never saw attests once, as a new agent", cert: unseen, leaf: leafOf(t, unseen)},
	} {
		t.Run(r.name, func(t *testing.T) { attestRow(t, server, agentOn(r.cert), r.leaf, r.wantErr) })
	}

	// The next reconcile pass while the wipe runs bans the agent that attested since, and only it.
	out, err = m.fleetd.service.Requests.Reconcile(ctx, deviceID)
	if err != nil || !strings.Contains(out.Detail, "SPIRE: banned 1 agent(s) of node-a") {
		t.Fatalf("the pass after the claim: %+v, %v; want the one new agent of node-a banned", out, err)
	}
	for _, r := range []struct {
		name, cert, wantErr string
		leaf                *x509.Certificate
	}{
		{name: "refuse/the LDevID first presented after the claim, at the next pass", cert: unseen, wantErr: banned},
		{name: "refuse/the previous LDevID still", cert: previous, wantErr: banned},
		{name: "ok/device B's agent still", cert: deviceB, leaf: nodeB.Leaf},
	} {
		t.Run(r.name, func(t *testing.T) { attestRow(t, server, agentOn(r.cert), r.leaf, r.wantErr) })
	}
	if n, err := adapter.BanDevice(ctx, deviceName); err != nil || n != 0 {
		t.Errorf("a ban with every agent of node-a banned: %d banned, %v; want 0, no error", n, err)
	}
}

// lateSPIRE is the SPIRE port whose adapter is set once fleetd's LDevID CA exists.
type lateSPIRE struct{ s fleet.SPIRE }

func (l *lateSPIRE) BanDevice(ctx context.Context, device string) (int, error) {
	return l.s.BanDevice(ctx, device)
}

// attestedAs attests a and checks the server named it the agent of leaf.
func attestedAs(t *testing.T, s spireServerRun, a *agentna.V1, leaf *x509.Certificate, what string) {
	t.Helper()
	svid, err := s.attest(context.Background(), a)
	if err != nil {
		t.Fatalf("%s: SPIRE's server refused: %v", what, err)
	}
	if want := "spiffe://" + trustDomain + "/spire/agent/tpm_devid/" + fingerprint(leaf); len(svid.URIs) != 1 || svid.URIs[0].String() != want {
		t.Fatalf("%s: agent SVID for %v, want %s", what, svid.URIs, want)
	}
}

// attestRow attests a: refused with wantErr, or accepted as the agent of leaf.
func attestRow(t *testing.T, s spireServerRun, a *agentna.V1, leaf *x509.Certificate, wantErr string) {
	t.Helper()
	if wantErr == "" {
		attestedAs(t, s, a, leaf, "after the ban")
		return
	}
	svid, err := s.attest(context.Background(), a)
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("SPIRE's server answered %v (SVID %v), want a refusal with %q", err, svid, wantErr)
	}
}

// issueNamed is an LDevID for leaf's key issued by ca to another device, name.
func issueNamed(t *testing.T, ca *pki.CA, leaf *x509.Certificate, name string) *pki.Certificate {
	t.Helper()
	_, hw, _, err := pki.HardwareModuleName(leaf)
	must(t, err)
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	must(t, err)
	c, err := iss.IssueLDevID(pki.Identity{DeviceName: name, DeviceSerial: "SN-B", HWSerialNum: hw}, leaf.PublicKey)
	must(t, err)
	return c
}

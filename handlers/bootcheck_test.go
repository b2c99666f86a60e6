package handlers_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/folly-infra/fleetd/netbox/layout"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
)

// enrollActive enrolls node-a (id 12) through the real agent with a provision request, then marks
// it active as a delivered configuration does. It returns the directory holding lak.pem and
// lak.blob, which the installed node's boot check reads.
func enrollActive(t testing.TB, cat fleet.Catalog, ekSHA256 string, cfg agent.EnrollConfig) (*fleetdUnderTest, string) {
	t.Helper()
	return enrollActiveOn(t, handlerstest.Config{Catalog: cat}, ekSHA256, cfg)
}

// enrollActiveOn is enrollActive on a fleetd configured by hc (its devices are set here).
func enrollActiveOn(t testing.TB, hc handlerstest.Config, ekSHA256 string, cfg agent.EnrollConfig) (*fleetdUnderTest, string) {
	t.Helper()
	d := fleettest.Declared(12, "node-a")
	d.Declared.EKHashes = []string{ekSHA256}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	hc.Devices = []fleet.Device{d}
	h := handlerstest.New(t, hc)
	f := &fleetdUnderTest{inv: h.Inv, cas: [2]*pki.CA{h.LDevIDCA, h.LAKCA}, url: h.URL, reg: h.Registry, devReg: h.DeviceRegistry, svc: h.Service, talosSecrets: h.TalosSecrets}
	disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{disk}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.FleetdURL, cfg.Device, cfg.Request, cfg.SysRoot, cfg.DevRoot = f.url, "node-a", d.Owned.Request, sysRoot, devRoot
	cfg.WorkflowDir, cfg.RetryWait, cfg.Log = t.TempDir(), time.Millisecond, zerolog.Nop()
	if cfg.MAC == "" {
		cfg.MAC = "52:54:00:12:34:56"
	}
	if err := agent.Enroll(context.Background(), cfg); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	got := f.inv.Get(12)
	got.Owned.State, got.Status = fleet.StateActive, fleet.StatusActive
	f.inv.Set(got)
	return f, cfg.WorkflowDir
}

// TestBootCheck runs the real `fleetd boot-check` against the real handlers and service on the
// TPM simulator, enrolled first through the real agent: the first check takes the baseline and
// writes one journal entry, the next one only moves last_boot_check (docs/design.md §5),
// at the cost of one device read and one write.
func TestBootCheck(t *testing.T) {
	sim, ch := simulatorBoot(t)
	defer sim.Close()
	f, dir := enrollActive(t, catalog(fleet.SecureBootRequired), simulatorEK(t, ch), agent.EnrollConfig{Channel: ch})
	cfg := agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: f.url, RetryWait: time.Millisecond}, Dir: dir, Channel: ch, Log: zerolog.Nop(),
		Hardware: agent.Hardware{SysRoot: t.TempDir(), DevRoot: t.TempDir()}}
	journal := len(f.inv.JournalOf(12)) // the enrollment's
	// ok/the enrollment kept its facts: proved by the TPM, claimed by the agent (docs/design.md, "Attested facts").
	enrolled := f.inv.Get(12).Owned.Facts
	if p, c := enrolled.Proved, enrolled.Claimed; p.EKSHA256 != simulatorEK(t, ch) || p.Source != layout.FactsFromEnrollment || len(p.BootState) != 64 ||
		p.BootPolicy == "" || c.SMBIOSUUIDSHA256 != fleet.UUIDHash(machineUUID) || c.DisksFound != 1 || c.Disks[0].Serial != "S4EWNX0R123456" ||
		c.MAC != "52:54:00:12:34:56" || c.Source != layout.FactsFromEnrollment || p.TPMVersion != "2.0" {
		t.Fatalf("fleet_facts after the enrollment = %+v", enrolled)
	}

	// An identity recorded by a fleetd that kept no attested name (before fleet_identity had
	// one): the first accepted check completes it, in its one write.
	older := f.inv.Get(12)
	if older.Owned.Identity.Name != "node-a" {
		t.Fatalf("the enrollment recorded the attested name %q, want node-a", older.Owned.Identity.Name)
	}
	older.Owned.Identity.Name = ""
	f.inv.Set(older)

	// ok/first check after the install: baseline taken, one journal entry.
	if err := agent.BootCheck(context.Background(), cfg); err != nil {
		t.Fatalf("first boot check: exit %d: %v", agent.ExitCode(err), err)
	}
	first := f.inv.Get(12)
	if got := first.Owned.Identity; got.Name != "node-a" || got.Request != older.Owned.Identity.Request || len(got.LAK.Chain) != len(older.Owned.Identity.LAK.Chain) {
		t.Errorf("the first check left fleet_identity named %q (request %q), want node-a, the rest kept", got.Name, got.Request)
	}
	if first.Owned.BootCheck != fleet.BootCheckOK || !strings.HasPrefix(first.Owned.BootBaseline, "fleetd-baseline/1\n") || first.Owned.LastBootCheck.IsZero() {
		t.Fatalf("after the first check: boot_check %q, last_boot_check %v, baseline %.40q", first.Owned.BootCheck, first.Owned.LastBootCheck, first.Owned.BootBaseline)
	}
	// The first check proves the boot state again, from the boot check; this node's claims cannot
	// be read (its Hardware is empty), so it claims nothing and the claimed facts stay as they are.
	if fa := first.Owned.Facts; fa.Proved.Source != layout.FactsFromBootCheck ||
		fa.Proved.EKSHA256 != enrolled.Proved.EKSHA256 || fa.Proved.BootPolicy != "" || !fa.Claimed.Since.Equal(enrolled.Claimed.Since) {
		t.Errorf("fleet_facts after the first check = %+v (enrollment's %+v)", fa, enrolled)
	}
	j := f.inv.JournalOf(12)
	if len(j) != journal+1 || !strings.HasPrefix(j[journal], "info: First boot check of node-a after its installation: baseline taken (") ||
		!strings.Contains(j[journal], "Secure Boot enabled") {
		t.Fatalf("journal after the first check: %q", j[journal:])
	}

	// ok/second check: no journal entry, last_boot_check moves, the baseline stays; NetBox is
	// asked for one device read with its change log beside it, and the conditional write.
	calls := f.inv.Calls.Load()
	if err := agent.BootCheck(context.Background(), cfg); err != nil {
		t.Fatalf("second boot check: exit %d: %v", agent.ExitCode(err), err)
	}
	if n := f.inv.Calls.Load() - calls; n != 3 {
		t.Errorf("the second check of the same boot made %d NetBox calls, want 3 (read the device and its change log at once, write the check)", n)
	}
	second := f.inv.Get(12)
	if !second.Owned.LastBootCheck.After(first.Owned.LastBootCheck) || second.Owned.BootBaseline != first.Owned.BootBaseline || second.Owned.BootCheck != fleet.BootCheckOK {
		t.Errorf("after the second check: last_boot_check %v (first %v), boot_check %q, baseline changed %v",
			second.Owned.LastBootCheck, first.Owned.LastBootCheck, second.Owned.BootCheck, second.Owned.BootBaseline != first.Owned.BootBaseline)
	}
	if j := f.inv.JournalOf(12); len(j) != journal+1 {
		t.Errorf("an hourly ok wrote a journal entry: %q", j[journal+1:])
	}
	if !second.Owned.Facts.Equal(first.Owned.Facts) {
		t.Errorf("an unchanged check changed fleet_facts: %+v, was %+v", second.Owned.Facts, first.Owned.Facts)
	}
	if n := counter(t, f, "fleetd_boot_checks_total", "ok"); n != 2 {
		t.Errorf("fleetd_boot_checks_total{outcome=ok} = %v, want 2", n)
	}
	n := node{ch: ch, dir: dir, url: f.url}
	t.Run("refusals", func(t *testing.T) { testBootCheckRefusals(t, f, n) })
	t.Run("conflicts", func(t *testing.T) { testBootCheckConflicts(t, f, n) })
}

// simulatorBoot is the TPM simulator booted from the RHEL 8 log (Secure Boot on).
func simulatorBoot(t testing.TB) (io.Closer, channel) {
	t.Helper()
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	if err := swtpm.ReplayEventLog(sim, eventlogs.RHEL8SecureBoot); err != nil {
		sim.Close()
		t.Fatal(err)
	}
	return sim, channel{ReadWriter: sim, log: eventlogs.RHEL8SecureBoot}
}

func simulatorEK(t testing.TB, ch channel) string {
	t.Helper()
	tpm, err := agent.OpenTPM(ch)
	if err != nil {
		t.Fatal(err)
	}
	ekPub, _, err := tpm.EK()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ekPub)
	return hex.EncodeToString(sum[:])
}

// node plays the running node by hand, so that a test can alter what it sends.
type node struct {
	ch  channel
	dir string
	url string
}

// request asks fleetd for a nonce and quotes over it with the AK from lak.blob, as `fleetd
// boot-check` does, and returns the request it would send.
func (n node) request(t testing.TB) api.BootCheckRequest {
	t.Helper()
	tpm, err := agent.OpenTPM(n.ch)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	blob, err := os.ReadFile(filepath.Join(n.dir, agent.FileLAKBlob))
	if err != nil {
		t.Fatal(err)
	}
	ak, err := tpm.Attest().LoadAK(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close(tpm.Attest())
	var nonce api.BootCheckNonce
	if status := postJSON(t, n.url+api.PathBootCheckNonce, struct{}{}, &nonce); status != http.StatusOK {
		t.Fatalf("nonce: status %d", status)
	}
	pp, err := tpm.AttestPlatform(ak, nonce.Nonce, nil)
	if err != nil {
		t.Fatal(err)
	}
	return api.BootCheckRequest{Token: nonce.Token, LAKChain: derChain(t, filepath.Join(n.dir, agent.FileLAKCert)), Platform: api.NewPlatform(pp)}
}

func derChain(t testing.TB, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertificatesPEM(raw)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, c := range certs {
		out = append(out, c.Raw)
	}
	return out
}

// postJSON posts in and decodes the answer into out (an api.Error for a 4xx or 5xx).
func postJSON(t testing.TB, url string, in, out any) int {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("decode the answer (status %d): %v", resp.StatusCode, err)
	}
	return resp.StatusCode
}

// counter reads one sample of a counter with an outcome label from the service's registry.
func counter(t *testing.T, f *fleetdUnderTest, name, outcome string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// newIssuer issues certificates from the fleet's CAs, or from others, in a test.
func newIssuer(t *testing.T, ldevid, lak *pki.CA) *pki.Issuer {
	t.Helper()
	i, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ldevid, LAK: lak, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

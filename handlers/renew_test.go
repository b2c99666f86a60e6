package handlers_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
)

// offsetClock is the wall clock moved forward by the test: certificates of the fleetd under test
// (one hour, renewed from half an hour) reach their renewal point without waiting.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// pastRenewalPoint is past the renewal point of the handlerstest certificates (one hour: half of
// it) and well within their lifetime.
const pastRenewalPoint = 35 * time.Minute

// dropAnswer lets fleetd decide and record a boot check, then closes the connection without an
// answer, once, when armed: the answer is lost, as when fleetd is killed after its NetBox write.
func dropAnswer(armed *atomic.Bool) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != api.PathBootCheck || !armed.CompareAndSwap(true, false) {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		})
	}
}

// renewalNode is node-a enrolled through the real agent on the simulator, active, on a fleetd
// whose clock the test moves.
type renewalNode struct {
	f     *fleetdUnderTest
	clock *offsetClock
	drop  *atomic.Bool
	dir   string
	cfg   agent.BootCheckConfig
	log   *bytes.Buffer
}

// Its fleetd signs with talosSecrets, or a new bundle when nil.
func newRenewalNode(t *testing.T, ch channel, talosSecrets []byte) *renewalNode {
	t.Helper()
	n := &renewalNode{clock: &offsetClock{}, drop: &atomic.Bool{}, log: &bytes.Buffer{}}
	hc := handlerstest.Config{Catalog: catalog(fleet.SecureBootRequired), Now: n.clock.Now, Wrap: dropAnswer(n.drop), TalosSecrets: talosSecrets}
	n.f, n.dir = enrollActiveOn(t, hc, simulatorEK(t, ch), agent.EnrollConfig{Channel: ch})
	n.cfg = agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: n.f.url, RetryWait: time.Millisecond, Retries: -1}, Dir: n.dir, Channel: ch,
		Log: zerolog.New(n.log)}
	return n
}

// check runs `fleetd boot-check` once, with install as its file writer (nil: the real one).
func (n *renewalNode) check(install func(string, []api.NodeFile) error) error {
	cfg := n.cfg
	cfg.Install = install
	n.log.Reset()
	return agent.BootCheck(context.Background(), cfg)
}

// files are the serials of the node's ldevid.pem and lak.pem.
func (n *renewalNode) files(t *testing.T) (ldevid, lak string) {
	t.Helper()
	return fileSerial(t, filepath.Join(n.dir, agent.FileLDevIDCert)), fileSerial(t, filepath.Join(n.dir, agent.FileLAKCert))
}

func fileSerial(t *testing.T, path string) string {
	t.Helper()
	der := derChain(t, path)
	c, err := x509.ParseCertificate(der[0])
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(c.SerialNumber.Bytes())
}

// settled checks that NetBox and the node agree: the node's files are the device's current
// certificates, no previous serial is kept, and fleet_identity carries the same chains.
func (n *renewalNode) settled(t *testing.T, when string) fleet.Device {
	t.Helper()
	d := n.f.inv.Get(12)
	ld, lak := n.files(t)
	if d.Owned.LDevIDSerial != ld || d.Owned.LAKSerial != lak {
		t.Errorf("%s: NetBox ldevid_serial %s lak_serial %s, the node holds %s and %s", when, d.Owned.LDevIDSerial, d.Owned.LAKSerial, ld, lak)
	}
	if d.Owned.LDevIDSerialPrevious != "" || d.Owned.LAKSerialPrevious != "" {
		t.Errorf("%s: previous serials kept after the node presented the new ones: %q %q", when, d.Owned.LDevIDSerialPrevious, d.Owned.LAKSerialPrevious)
	}
	id := d.Owned.Identity
	if len(id.LDevID.Chain) == 0 || len(id.LAK.Chain) == 0 || serialOfDER(t, id.LDevID.Chain[0]) != ld || serialOfDER(t, id.LAK.Chain[0]) != lak {
		t.Errorf("%s: fleet_identity does not carry the current certificates", when)
	}
	return d
}

// renewals is fleetd_cert_renewals_total{profile, result}, 0 for a series that does not exist.
func renewals(t *testing.T, reg *prometheus.Registry, profile, result string) float64 {
	t.Helper()
	return max(0, metricValue(t, reg, "fleetd_cert_renewals_total", map[string]string{"profile": profile, "result": result}))
}

// gauge is the value of the gauge name whose label k is v (-1 when there is none).
func gauge(t *testing.T, reg *prometheus.Registry, name, k, v string) float64 {
	t.Helper()
	return metricValue(t, reg, name, map[string]string{k: v})
}

// metricValue is the value of the first series of name carrying the labels want, -1 for none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// deviceView checks that the operator's view of a device just renewed shows both serials of
// the handover and the current certificates' NotAfter and renewal point (fleet_identity's), and
// that the reconcile's metrics export the same times.
func (n *renewalNode) deviceView(t *testing.T, d fleet.Device) {
	t.Helper()
	req, _ := http.NewRequest("GET", n.f.url+"/v1/devices/node-a", nil)
	req.Header.Set("Authorization", "Bearer op")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Certs map[string]string `json:"certificates"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	leaf := func(der []byte) *x509.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ld, lak := leaf(d.Owned.Identity.LDevID.Chain[0]), leaf(d.Owned.Identity.LAK.Chain[0])
	want := map[string]string{
		"ldevid_serial": d.Owned.LDevIDSerial, "lak_serial": d.Owned.LAKSerial,
		"ldevid_serial_previous": d.Owned.LDevIDSerialPrevious, "lak_serial_previous": d.Owned.LAKSerialPrevious,
		"ldevid_not_after": ld.NotAfter.UTC().Format(time.RFC3339), "lak_not_after": lak.NotAfter.UTC().Format(time.RFC3339),
		// handlerstest: a lifetime of one hour, renewed from half of it
		"ldevid_renew_after": ld.NotAfter.Add(-30 * time.Minute).UTC().Format(time.RFC3339),
		"lak_renew_after":    lak.NotAfter.Add(-30 * time.Minute).UTC().Format(time.RFC3339),
	}
	for k, w := range want {
		if v.Certs[k] != w || w == "" {
			t.Errorf("device view certificates.%s = %q, want %q", k, v.Certs[k], w)
		}
	}
	if _, err := n.f.svc.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name, profile string
		want          time.Time
	}{
		{"fleetd_device_cert_expiry_timestamp_seconds", "ldevid", ld.NotAfter},
		{"fleetd_device_cert_expiry_timestamp_seconds", "lak", lak.NotAfter},
		{"fleetd_device_cert_renewal_timestamp_seconds", "ldevid", ld.NotAfter.Add(-30 * time.Minute)},
	} {
		if got := gauge(t, n.f.devReg, g.name, "profile", g.profile); got != float64(g.want.Unix()) {
			t.Errorf("%s{profile=%q} = %v, want %d (%s)", g.name, g.profile, got, g.want.Unix(), g.want)
		}
	}
}

func serialOfDER(t *testing.T, der []byte) string {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(c.SerialNumber.Bytes())
}

// TestRenewal runs the real `fleetd boot-check` against the real handlers and service on the
// TPM simulator: a check before the renewal point renews nothing; the first after it renews
// both certificates for the same TPM keys, installs them, moves the old serials into
// ldevid_serial_previous and lak_serial_previous and journals it once; the next check clears
// them; then every cut of a renewal leaves a node that passes its next check and is renewed by
// it (docs/enrollment.md, "Renewal").
func TestRenewal(t *testing.T) {
	sim, ch := simulatorBoot(t)
	defer sim.Close()
	n := newRenewalNode(t, ch, nil)

	// ok/not due: the first check takes the baseline and renews nothing.
	if err := n.check(nil); err != nil {
		t.Fatalf("first check: exit %d: %v", agent.ExitCode(err), err)
	}
	before := n.settled(t, "before the renewal point")
	journal := len(n.f.inv.JournalOf(12))
	pubBefore, _ := os.ReadFile(filepath.Join(n.dir, agent.FileLDevIDPub))

	// ok/renewed: past the renewal point, both certificates are renewed.
	n.clock.advance(pastRenewalPoint)
	if err := n.check(nil); err != nil {
		t.Fatalf("check past the renewal point: exit %d: %v", agent.ExitCode(err), err)
	}
	after := n.f.inv.Get(12)
	ld, lak := n.files(t)
	if ld == before.Owned.LDevIDSerial || lak == before.Owned.LAKSerial || after.Owned.LDevIDSerial != ld || after.Owned.LAKSerial != lak {
		t.Fatalf("after the renewal: the node holds %s %s, NetBox has %s %s, before %s %s", ld, lak,
			after.Owned.LDevIDSerial, after.Owned.LAKSerial, before.Owned.LDevIDSerial, before.Owned.LAKSerial)
	}
	if after.Owned.LDevIDSerialPrevious != before.Owned.LDevIDSerial || after.Owned.LAKSerialPrevious != before.Owned.LAKSerial {
		t.Errorf("previous serials %q %q, want the replaced %s %s", after.Owned.LDevIDSerialPrevious, after.Owned.LAKSerialPrevious,
			before.Owned.LDevIDSerial, before.Owned.LAKSerial)
	}
	if pub, _ := os.ReadFile(filepath.Join(n.dir, agent.FileLDevIDPub)); !bytes.Equal(pub, pubBefore) {
		t.Error("the renewal changed ldevid.pub: it must renew the certificate of the same key")
	}
	for _, f := range []string{agent.FileLDevIDCert, agent.FileLAKCert} {
		if st, err := os.Stat(filepath.Join(n.dir, f)); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s after the renewal: %v %v, want mode 0644", f, st.Mode(), err)
		}
	}
	j := n.f.inv.JournalOf(12)
	if len(j) != journal+1 || !strings.Contains(j[journal], "renewed its LDevID "+ld+" (replacing "+before.Owned.LDevIDSerial) ||
		!strings.Contains(j[journal], "LAK "+lak) {
		t.Errorf("journal after the renewal: %q", j[journal:])
	}
	if !strings.Contains(n.log.String(), `"message":"certificates renewed`) {
		t.Errorf("the node's log does not say it renewed: %s", n.log)
	}
	for _, p := range []string{"ldevid", "lak"} {
		if got := renewals(t, n.f.reg, p, "renewed"); got != 1 {
			t.Errorf("fleetd_cert_renewals_total{profile=%q,result=\"renewed\"} = %v after one renewal, want 1", p, got)
		}
	}
	n.deviceView(t, after)

	// ok/handover done: the next check presents the new certificates, which clears the old ones.
	if err := n.check(nil); err != nil {
		t.Fatalf("check after the renewal: exit %d: %v", agent.ExitCode(err), err)
	}
	n.settled(t, "after the renewal")
	if j := n.f.inv.JournalOf(12); len(j) != journal+1 {
		t.Errorf("a check after the renewal wrote a journal entry: %q", j[journal+1:])
	}
	t.Run("cuts", func(t *testing.T) { testRenewalCuts(t, n) })
}

// testRenewalCuts cuts a renewal at each point: the cut check may fail, the node's next check
// must pass and renew, and the one after it settle the handover.
func testRenewalCuts(t *testing.T, n *renewalNode) {
	errPower := errors.New("power lost")
	rows := []struct {
		name    string
		arm     func()
		install func(string, []api.NodeFile) error
		retries int // the node's retries of a request (0: none)
		exit    int
	}{
		{name: "cut/answer lost after the NetBox write (fleetd killed)", arm: func() { n.drop.Store(true) }, exit: agent.ExitFleetd},
		// The node's client retries the same request, which fleetd refuses as a replay (the lost
		// attempt was recorded): the check is made again from a new nonce, and renews.
		{name: "cut/answer lost after the NetBox write, the node's retry", arm: func() { n.drop.Store(true) }, retries: 2, exit: agent.ExitOK},
		{name: "cut/node down before it writes", install: func(string, []api.NodeFile) error { return errPower }, exit: agent.ExitFailure},
		{name: "cut/node down between its two files", install: func(dir string, fs []api.NodeFile) error {
			if err := agent.InstallNodeFiles(dir, fs[:1]); err != nil {
				return err
			}
			return errPower
		}, exit: agent.ExitFailure},
		{name: "cut/NetBox 5xx on the write", arm: func() {
			n.f.inv.FailUpdates(func(int64, fleet.Patch) (bool, error) { return false, errors.New("503 Service Unavailable") })
		}, exit: agent.ExitFleetd},
		{name: "cut/NetBox wrote and its answer was lost", arm: func() {
			n.f.inv.FailUpdates(func(int64, fleet.Patch) (bool, error) { return true, errors.New("read: connection reset") })
		}, exit: agent.ExitFleetd},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			n.clock.advance(pastRenewalPoint)
			before := n.f.inv.Get(12)
			if r.arm != nil {
				r.arm()
			}
			if r.retries > 0 {
				n.cfg.Conn.Retries = r.retries
			}
			err := n.check(r.install)
			n.cfg.Conn.Retries = -1
			n.f.inv.FailUpdates(nil)
			if got := agent.ExitCode(err); got != r.exit {
				t.Errorf("the cut check: exit %d (%v), want %d", got, err, r.exit)
			}
			if err := n.check(nil); err != nil {
				t.Fatalf("the check after the cut: exit %d: %v", agent.ExitCode(err), err)
			}
			ld, lak := n.files(t)
			if lak == before.Owned.LAKSerial || ld == before.Owned.LDevIDSerial {
				t.Errorf("after the check that followed the cut the node still holds %s %s", ld, lak)
			}
			if err := n.check(nil); err != nil {
				t.Fatalf("the second check after the cut: exit %d: %v", agent.ExitCode(err), err)
			}
			n.settled(t, "after the cut")
		})
	}
}

// TestRenewalRefusals: a due certificate is not renewed for a node that should not run, and the
// node's exit code and log say why; NetBox's serials and files stay, and no journal entry is
// written for it. A check that is itself refused renews nothing. Each row has a node
// of its own (its own TPM, enrollment, fleetd and NetBox), enrolled, checked once and past its
// renewal point, so no row can pass on what another left; the first row, on such a node with
// nothing altered, is renewed.
func TestRenewalRefusals(t *testing.T) {
	type row struct {
		name  string
		edit  func(d *fleet.Device)
		files func(t *testing.T, n *renewalNode) // alters the node's files
		exit  int
		code  string // the renewal refusal the node logs, or the check's refusal; "" for a renewal
		// lakRenewed: the due LAK is renewed (with the LDevID, or alone when the refusal is the
		// LDevID's).
		lakRenewed bool
	}
	rows := []row{
		{name: "ok/a node with nothing altered is renewed", exit: 0, lakRenewed: true},
		{name: "refuse/device not active in NetBox", edit: func(d *fleet.Device) { d.Status = fleet.StatusOffline },
			exit: agent.ExitNotRenewed, code: fleet.RenewRefusedNotActive},
		{name: "refuse/desired_action waiting", edit: func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe },
			exit: agent.ExitNotRenewed, code: fleet.RenewRefusedAction},
		{name: "refuse/EK changed", edit: func(d *fleet.Device) { d.Declared.EKHashes = []string{strings.Repeat("ab", 32)} },
			exit: agent.ExitNotRenewed, code: fleet.RenewRefusedEKChanged},
		{name: "refuse/drift", edit: func(d *fleet.Device) { d.Owned.BootBaseline = "fleetd-baseline/1\nnot a baseline" },
			exit: agent.ExitDrift, code: fleet.RenewRefusedDrift},
		{name: "refuse/no identity to renew from", edit: func(d *fleet.Device) { d.Owned.Identity = fleet.IdentityMaterial{} },
			exit: agent.ExitNotRenewed, code: fleet.RenewRefusedIdentity},
		{name: "refuse/retired: the check itself is refused", edit: func(d *fleet.Device) {
			d.Status, d.Owned.State = fleet.StatusDecommissioning, fleet.StateRetired
		}, exit: agent.ExitRefused, code: "not_active"},
		{name: "refuse/wiped: its LAK is no longer the device's", edit: func(d *fleet.Device) {
			d.Owned.State, d.Owned.LDevIDSerial, d.Owned.LAKSerial, d.Owned.Identity = fleet.StateWiped, "", "", fleet.IdentityMaterial{}
		}, exit: agent.ExitRefused, code: "lak_not_current"},
		{name: "refuse/an LDevID fleetd does not know", files: func(t *testing.T, n *renewalNode) {
			if err := os.WriteFile(filepath.Join(n.dir, agent.FileLDevIDCert), issueLDevID(t, n), 0o644); err != nil {
				t.Fatal(err)
			}
		}, exit: agent.ExitNotRenewed, code: fleet.RenewRefusedLDevIDOld, lakRenewed: true},
		{name: "refuse/an LDevID key that does not load", files: func(t *testing.T, n *renewalNode) {
			if err := os.WriteFile(filepath.Join(n.dir, agent.FileLDevIDPriv), []byte("not a key"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, exit: agent.ExitNotRenewed, code: fleet.RenewRefusedLDevIDProof, lakRenewed: true},
	}
	var talosSecrets []byte // one bundle for every row's fleetd: making one takes seconds
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			sim, ch := simulatorBoot(t)
			defer sim.Close()
			n := newRenewalNode(t, ch, talosSecrets)
			talosSecrets = n.f.talosSecrets
			if err := n.check(nil); err != nil {
				t.Fatalf("first check: exit %d: %v", agent.ExitCode(err), err)
			}
			n.clock.advance(pastRenewalPoint)
			d := n.f.inv.Get(12)
			if r.edit != nil {
				r.edit(&d)
				n.f.inv.Set(d)
			}
			if r.files != nil {
				r.files(t, n)
			}
			ldFile, lakFile := n.files(t)
			journal := len(n.f.inv.JournalOf(12))
			result := r.code
			if result == "" {
				result = "renewed"
			}
			err := n.check(nil)
			if got := agent.ExitCode(err); got != r.exit {
				t.Errorf("exit %d (%v), want %d", got, err, r.exit)
			}
			// A renewal or a refused one is counted under its result; a check refused itself
			// renews nothing and counts nothing.
			if want := map[bool]float64{true: 0, false: 1}[r.exit == agent.ExitRefused]; renewals(t, n.f.reg, "ldevid", result) != want {
				t.Errorf("fleetd_cert_renewals_total{profile=\"ldevid\",result=%q} = %v, want %v", result, renewals(t, n.f.reg, "ldevid", result), want)
			}
			if r.code != "" && !strings.Contains(n.log.String(), r.code) && (err == nil || !strings.Contains(err.Error(), r.code)) {
				t.Errorf("neither the node's log nor its error names %s: %v; %s", r.code, err, n.log)
			}
			after := n.f.inv.Get(12)
			ld, lak := n.files(t)
			if renewed := r.code == ""; (after.Owned.LDevIDSerial != d.Owned.LDevIDSerial) != renewed || (ld != ldFile) != renewed ||
				renewed && (ld != after.Owned.LDevIDSerial || after.Owned.LDevIDSerialPrevious != d.Owned.LDevIDSerial) ||
				!renewed && after.Owned.LDevIDSerialPrevious != "" {
				t.Errorf("LDevID: NetBox %s (previous %q), node %s; before NetBox %s, node %s; want renewed %v",
					after.Owned.LDevIDSerial, after.Owned.LDevIDSerialPrevious, ld, d.Owned.LDevIDSerial, ldFile, renewed)
			}
			if lakChanged := after.Owned.LAKSerial != d.Owned.LAKSerial; lakChanged != r.lakRenewed || (lak != lakFile) != r.lakRenewed || lak != after.Owned.LAKSerial && r.lakRenewed {
				t.Errorf("LAK renewed %v (NetBox %s, node %s, was %s), want %v", lakChanged, after.Owned.LAKSerial, lak, lakFile, r.lakRenewed)
			}
			entries := n.f.inv.JournalOf(12)[journal:]
			for _, e := range entries {
				if r.code != "" && strings.Contains(e, "renewed its LDevID") || !r.lakRenewed && strings.Contains(e, "renew") {
					t.Errorf("a refused renewal wrote a journal entry: %q", e)
				}
			}
			if r.code == "" && (len(entries) != 1 || !strings.Contains(entries[0], "renewed its LDevID "+ld)) {
				t.Errorf("journal after the renewal: %q, want one entry naming LDevID %s", entries, ld)
			}
		})
	}
}

// issueLDevID is an LDevID of the fleet's CA that NetBox does not record (for the node's key).
func issueLDevID(t *testing.T, n *renewalNode) []byte {
	t.Helper()
	der := derChain(t, filepath.Join(n.dir, agent.FileLDevIDCert))
	cur, err := x509.ParseCertificate(der[0])
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: n.f.cas[0], LAK: n.f.cas[1], LDevIDLifetime: time.Hour, LAKLifetime: time.Hour,
		Rand: strings.NewReader(strings.Repeat("r", 4096)), Now: n.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.RenewIdentity("node-a", "", cur)
	if err != nil {
		t.Fatal(err)
	}
	c, err := iss.IssueLDevID(id, cur.PublicKey)
	if err != nil {
		t.Fatal(fmt.Errorf("issue a stray LDevID: %w", err))
	}
	return c.PEM()
}

package handlers_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/prometheus/client_golang/prometheus"
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

// channel is the simulator as the agent's TPM, with the event log the firmware would have.
type channel struct {
	io.ReadWriter
	log []byte
}

func (c channel) MeasurementLog() ([]byte, error) { return c.log, nil }
func (c channel) Close() error                    { return nil }

const machineUUID = "4c4c4544-0042-3510-8052-b4c04f4e3232"

// fleetdUnderTest is the real fleet service and handlers on in-memory NetBox and Tinkerbell.
type fleetdUnderTest struct {
	inv *fleettest.NetBox
	cas [2]*pki.CA // LDevID, LAK
	url string
	reg *prometheus.Registry // the service's metrics
	// devReg holds the service's per-device series (served behind the metrics token).
	devReg *prometheus.Registry
	svc    *fleet.Service
	// talosSecrets is the bundle its renderer signs with: a test that starts several fleetds
	// passes the first one's to the others (handlerstest.Config.TalosSecrets).
	talosSecrets []byte
}

func newFleetd(t testing.TB, cat fleet.Catalog, d fleet.Device) *fleetdUnderTest {
	t.Helper()
	return newFleetdWrapped(t, cat, d, nil)
}

// newFleetdWrapped is newFleetd whose handler is wrapped (handlerstest.Config.Wrap; nil: not).
func newFleetdWrapped(t testing.TB, cat fleet.Catalog, d fleet.Device, wrap func(http.Handler) http.Handler) *fleetdUnderTest {
	t.Helper()
	f := handlerstest.New(t, handlerstest.Config{Catalog: cat, Devices: []fleet.Device{d}, Wrap: wrap})
	return &fleetdUnderTest{inv: f.Inv, cas: [2]*pki.CA{f.LDevIDCA, f.LAKCA}, url: f.URL, reg: f.Registry, devReg: f.DeviceRegistry}
}

// beforeEvidence wraps a fleetd's handler so that, when the evidence arrives, change is made to
// device 12 in NetBox first (*inv, set once the fleetd exists): the owner acting between the
// agent's two round trips.
func beforeEvidence(inv **fleettest.NetBox, change func(*fleet.Device)) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == api.PathAttestEvidence {
				d := (*inv).Get(12)
				change(&d)
				(*inv).Set(d)
			}
			h.ServeHTTP(w, r)
		})
	}
}

func catalog(secureBoot fleet.SecureBoot, patches ...string) fleet.Catalog {
	c, _ := fleettest.Catalog().Class("talos-worker")
	c.SecureBoot = secureBoot
	for _, p := range patches {
		c.Talos = &fleet.TalosClass{MachineType: "worker", Patches: []json.RawMessage{json.RawMessage(p)}}
	}
	return fleet.NewCatalog(c)
}

// TestEnrollment runs the real agent against the real handlers and service, with the TPM
// simulator booted from a recorded event log, and checks what NetBox records, what the agent
// writes, and that a refusal issues nothing and authorizes no disk (docs/design.md §4; docs/enrollment.md, "Refusals").
func TestEnrollment(t *testing.T) {
	disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	other := fakehw.Disk{Dev: "sda", Serial: "WD-WCC4N1234", Model: "WDC_WD40EFRX", Bus: "ata"}
	twin := fakehw.Disk{Dev: "sdb", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_870", Bus: "ata"}
	type row struct {
		name      string
		action    fleet.Action
		state     fleet.State
		log       []byte
		cat       fleet.Catalog
		tpmMajor  string
		disks     []fakehw.Disk
		ekHash    string // "" = the simulator's EK
		request   string // the agent's FLEETD_REQUEST; "" = the device's current request
		wantExit  int
		wantState fleet.State
		// wantRequest is the device's request after the enrollment; "" = the one it started with.
		wantRequest string
		wantJourn   string // substring of the one journal entry
		wantCerts   bool
		wantConfig  bool
		other       func(*fleet.Device) // another fleetd instance's write that lands just before the attestation's
		// between is the owner's change to the device between the challenge and the evidence.
		between func(*fleet.Device)
	}
	sb := eventlogs.RHEL8SecureBoot
	rows := []row{
		{name: "ok/provision: certificates, disk, installing, configuration pending", action: fleet.ActionProvision, log: sb,
			cat: catalog(fleet.SecureBootRequired), wantState: fleet.StateInstalling, wantCerts: true, wantConfig: true,
			wantJourn: "success: Attested node-a for provision request"},
		{name: "ok/attest: disk only, no certificates (the node keeps its own), active again", action: fleet.ActionAttest, log: sb,
			cat: catalog(fleet.SecureBootAny), wantState: fleet.StateActive,
			wantJourn: "the node keeps its LDevID and LAK, and its next boot check takes a new boot baseline."},
		{name: "ok/wipe: disk only, no certificates", action: fleet.ActionWipe, log: sb, cat: catalog(fleet.SecureBootAny),
			wantState: fleet.StateWiping, wantJourn: "success: Attested node-a for wipe request"},
		{name: "refuse/unknown EK", action: fleet.ActionProvision, log: sb, cat: catalog(fleet.SecureBootAny),
			ekHash: strings.Repeat("ab", 32), wantExit: agent.ExitRefused, wantState: fleet.StatePending}, // before activation: nothing written
		{name: "refuse/Secure Boot off where the class requires it", action: fleet.ActionProvision, log: eventlogs.Ubuntu2104NoSecureBoot,
			cat: catalog(fleet.SecureBootRequired), wantExit: agent.ExitRefused, wantState: fleet.StatePending, wantJourn: "(secureboot_disabled)"},
		{name: "refuse/a boot the boot policy does not allow (another kernel): nothing issued or wiped", action: fleet.ActionProvision,
			log: eventlogs.RHEL8OtherKernel(), cat: catalog(fleet.SecureBootRequired), wantExit: agent.ExitRefused, wantState: fleet.StatePending,
			wantJourn: "danger: Attestation of node-a refused (boot_policy)"},
		{name: "refuse/declared disk absent", action: fleet.ActionProvision, log: sb, cat: catalog(fleet.SecureBootAny),
			disks: []fakehw.Disk{other}, wantExit: agent.ExitRefused, wantState: fleet.StatePending, wantJourn: "(disk_absent)"},
		{name: "refuse/declared disk present twice", action: fleet.ActionWipe, log: sb, cat: catalog(fleet.SecureBootAny),
			disks: []fakehw.Disk{disk, twin}, wantExit: agent.ExitRefused, wantState: fleet.StatePending, wantJourn: "(disk_ambiguous)"},
		{name: "refuse/TPM 1.2", action: fleet.ActionProvision, log: sb, cat: catalog(fleet.SecureBootAny), tpmMajor: "1",
			wantExit: agent.ExitRefused, wantState: fleet.StatePending}, // before activation: nothing written
		{name: "refuse/a stale Workflow of another request enrolls for none (nothing recorded)", action: fleet.ActionAttest, log: sb,
			cat: catalog(fleet.SecureBootAny), request: "wipe-00000000", wantExit: agent.ExitRefused, wantState: fleet.StatePending},
		{name: "refuse/the owner's request moved on after the challenge: the token is of the old request, nothing recorded or issued",
			action: fleet.ActionProvision, log: sb, cat: catalog(fleet.SecureBootAny), between: func(d *fleet.Device) {
				d.Owned.Request, d.Owned.Workflow = "provision-zzzzzzzz", "node-a-provision-zzzzzzzz"
			}, wantExit: agent.ExitRefused, wantState: fleet.StatePending, wantRequest: "provision-zzzzzzzz"}, // before activation: nothing written
		{name: "refuse/another instance recorded the attestation first: nothing issued here is handed out", action: fleet.ActionProvision,
			log: sb, cat: catalog(fleet.SecureBootAny), other: func(d *fleet.Device) { d.Owned.State = fleet.StateInstalling },
			wantExit: agent.ExitRefused, wantState: fleet.StateInstalling},
		{name: "refuse/no accepted request", action: fleet.ActionProvision, state: fleet.StateActive, log: sb, cat: catalog(fleet.SecureBootAny),
			wantExit: agent.ExitRefused, wantState: fleet.StateActive},
		{name: "refuse/a configuration Talos would reject fails the request, nothing issued", action: fleet.ActionProvision, log: sb,
			cat:      catalog(fleet.SecureBootAny, `{"machine": {"features": {"kubernetesTalosAPIAccess": {"enabled": true, "allowedRoles": ["os:reader"]}}}}`),
			wantExit: agent.ExitRefused, wantState: fleet.StateFailed,
			wantJourn: "danger: provision request provision-k3f9x2mq failed: the configuration of node-a would be rejected by its OS, so no certificate was handed out and nothing was wiped"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			sim, err := simulator.Get()
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			if err := swtpm.ReplayEventLog(sim, r.log); err != nil {
				t.Fatal(err)
			}
			ch := channel{ReadWriter: sim, log: r.log}
			tpm, err := agent.OpenTPM(ch)
			if err != nil {
				t.Fatal(err)
			}
			ekPub, _, err := tpm.EK()
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(ekPub)
			d := fleettest.Declared(12, "node-a")
			d.Declared.EKHashes = []string{hex.EncodeToString(sum[:])}
			if r.ekHash != "" {
				d.Declared.EKHashes = []string{r.ekHash}
			}
			d.Owned = fleet.Owned{State: fleet.StatePending, Request: string(r.action) + "-k3f9x2mq", Workflow: "node-a-" + string(r.action) + "-k3f9x2mq"}
			if r.state != "" {
				d.Owned.State = r.state
			}
			var wrap func(http.Handler) http.Handler
			var inv *fleettest.NetBox
			if r.between != nil {
				wrap = beforeEvidence(&inv, r.between)
			}
			f := newFleetdWrapped(t, r.cat, d, wrap)
			inv = f.inv
			if r.other != nil {
				f.inv.ConflictOnce[12] = r.other
			}

			major := "2"
			if r.tpmMajor != "" {
				major = r.tpmMajor
			}
			disks := r.disks
			if disks == nil {
				disks = []fakehw.Disk{disk, other}
			}
			sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: major, Disks: disks})
			if err != nil {
				t.Fatal(err)
			}
			wf := t.TempDir()
			request := d.Owned.Request
			if r.request != "" {
				request = r.request
			}
			cfg := agent.EnrollConfig{Conn: agent.Conn{FleetdURL: f.url, RetryWait: time.Millisecond}, Device: "node-a", Request: request, Channel: ch,
				SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, Log: zerolog.Nop()}
			if major != "2" {
				cfg.Channel = nil // the agent looks at the machine's TPM itself and finds a 1.2
			}
			err = agent.Enroll(context.Background(), cfg)
			if code := agent.ExitCode(err); code != r.wantExit {
				t.Fatalf("agent exit %d (%v), want %d", code, err, r.wantExit)
			}
			got := f.inv.Get(12)
			if got.Owned.State != r.wantState {
				t.Errorf("fleet_state %q, want %q (message %q)", got.Owned.State, r.wantState, got.Owned.Message)
			}
			if want := cmp.Or(r.wantRequest, d.Owned.Request); got.Owned.Request != want {
				t.Errorf("fleet_request %q, want %q", got.Owned.Request, want)
			}
			j := f.inv.JournalOf(12)
			if r.wantJourn == "" && len(j) != 0 || r.wantJourn != "" && (len(j) != 1 || !strings.Contains(j[0], r.wantJourn)) {
				t.Errorf("journal %q, want one entry with %q", j, r.wantJourn)
			}
			_, diskErr := os.Stat(filepath.Join(wf, agent.FileDisk))
			if authorized := diskErr == nil; authorized != (r.wantExit == 0) {
				t.Errorf("disk authorization written = %v, want %v", authorized, r.wantExit == 0)
			}
			checkCerts(t, f, got, wf, r.wantCerts)
			if id := got.Owned.Identity; id.Empty() == r.wantConfig || r.wantConfig && (id.Request != got.Owned.Request || id.Name != got.Name || id.Check() != nil) {
				t.Errorf("fleet_identity %+v, want it recorded for the request and the device's name = %v", id, r.wantConfig)
			}
		})
	}
}

// checkCerts checks that certificates were issued, recorded and written exactly when expected,
// and that the written ones chain to fleetd's CAs with the serials NetBox holds.
func checkCerts(t *testing.T, f *fleetdUnderTest, d fleet.Device, wf string, want bool) {
	t.Helper()
	recorded := d.Owned.LDevIDSerial != "" || d.Owned.LAKSerial != ""
	if recorded != want {
		t.Errorf("certificate serials recorded = %v (%q, %q), want %v", recorded, d.Owned.LDevIDSerial, d.Owned.LAKSerial, want)
	}
	for i, file := range []string{agent.FileLDevIDCert, agent.FileLAKCert} {
		raw, err := os.ReadFile(filepath.Join(wf, file))
		if !want {
			if err == nil {
				t.Errorf("%s written for a request that issues no certificate", file)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		certs, err := pki.ParseCertificatesPEM(raw)
		if err != nil || len(certs) < 2 {
			t.Fatalf("%s: %d certificates, %v", file, len(certs), err)
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: f.cas[i].Roots(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s does not chain to fleetd's CA: %v", file, err)
		}
		serial := hex.EncodeToString(certs[0].SerialNumber.Bytes())
		if want := []string{d.Owned.LDevIDSerial, d.Owned.LAKSerial}[i]; serial != want {
			t.Errorf("%s serial %s, NetBox holds %s", file, serial, want)
		}
	}
}

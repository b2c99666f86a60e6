package spire_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/dev/swtpm/eventlogs"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/webhook"
)

const (
	deviceID   = 12
	deviceName = "node-a"
	diskSerial = "S4EWNX0R123456" // fleettest.Declared's disk_serial
	// request is the device's accepted owner request. An attest request issues the LDevID and
	// the LAK exactly as a provision does (fleet/enroll_evidence.go step 3) without rendering a
	// Talos configuration, which has no counterpart in SPIRE.
	request = "attest-k3f9x2mq"
)

// bootLog is the firmware's event log the swtpm's PCRs are replayed from.
var bootLog = eventlogs.RHEL8SecureBoot

// fleetd is fleetd's enrollment in one process: the real handlers and fleet service on in-memory
// NetBox and Tinkerbell (fleettest), with in-memory dev CAs, as handlers/enroll_test.go wires
// them. The EK policy is hash+cert with the swtpm EK CA, as for a fleet whose TPMs carry EK
// certificates. It records the last body of each enrollment route, so a benchmark can replay
// the exchange without the TPM.
type fleetd struct {
	inv           *fleettest.Inventory
	device        fleet.Device // as declared before the enrollment
	ldevidCA      *pki.CA
	ldevidCAFiles pki.CAFiles // ldevidCAFiles.Root is SPIRE's devid_ca_path
	ek            *attest.EKVerifier
	tokens        *attest.TokenSealer
	issuer        *pki.Issuer
	handler       http.Handler
	url           string

	mu   sync.Mutex
	body map[string][]byte // route path → last request body
}

func newFleetd(tb testing.TB) *fleetd {
	tb.Helper()
	d := fleettest.Declared(deviceID, deviceName)
	d.Declared.EKHashes = []string{tpm.EKSHA256}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: request, Workflow: deviceName + "-" + request}
	f := &fleetd{inv: fleettest.NewInventory(d), device: d, body: map[string][]byte{}}
	cas := make([]*pki.CA, 2)
	for i, name := range []string{"fleetd LDevID", "fleetd LAK"} {
		ca, _, err := pki.NewCA(pki.NewCAConfig{Name: name, Lifetime: 24 * time.Hour, Rand: rand.Reader, Now: time.Now})
		must(tb, err)
		cas[i] = ca
	}
	f.ldevidCA = cas[0]
	var err error
	f.ldevidCAFiles, err = f.ldevidCA.WriteFiles(tb.TempDir(), "ldevid-ca")
	must(tb, err)
	f.issuer, err = pki.NewIssuer(pki.IssuerConfig{LDevID: cas[0], LAK: cas[1], LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	must(tb, err)
	f.ek, err = attest.NewEKVerifier(attest.EKVerifierConfig{Policy: attest.EKPolicyHashCert, BundlePEM: ekCA.BundlePEM(), Now: time.Now})
	must(tb, err)
	// A token lives an hour, so a benchmark can replay the recorded exchange for as long as it runs.
	f.tokens, err = attest.NewTokenSealer(attest.TokenConfig{Key: make([]byte, attest.TokenKeySize), Lifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	must(tb, err)
	pending, err := fleet.NewPending(fleet.PendingConfig{Clock: fleet.SystemClock{}})
	must(tb, err)
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore"}, fleet.Deps{Inventory: f.inv, Installer: fleettest.NewInstaller(),
		Catalog: fleettest.Catalog(), Pending: pending, Attest: fleet.Attestation{EK: f.ek, Tokens: f.tokens, Issuer: f.issuer},
		Clock: fleet.SystemClock{}, Random: rand.Reader, Logger: zerolog.Nop()})
	must(tb, err)
	intake, err := webhook.New(webhook.Config{Secret: []byte("s")}, webhook.Deps{Reconciler: svc})
	must(tb, err)
	h, err := handlers.New(handlers.Deps{Service: svc, Webhooks: intake, Gatherer: prometheus.NewRegistry(), OperatorToken: []byte("op"), Logger: zerolog.Nop()})
	must(tb, err)
	f.handler = h
	srv := httptest.NewServer(http.HandlerFunc(f.record))
	tb.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// record keeps the body of each enrollment request, then serves it.
func (f *fleetd) record(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == api.PathAttestChallenge || r.URL.Path == api.PathAttestEvidence {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.body[r.URL.Path] = b
		f.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	f.handler.ServeHTTP(w, r)
}

// recorded is the last body the agent sent to path.
func (f *fleetd) recorded(path string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.body[path]
}

// enrolled is a machine after `fleetd enroll` succeeded: its running swtpm and the Workflow
// directory holding what the agent wrote.
type enrolled struct {
	fleetd      *fleetd
	tpm         *swtpm.Instance
	workflowDir string
}

// enroll starts the swtpm as after a power-on, replays the boot log into its PCRs, and runs the
// real agent against it and fleetd. The swtpm keeps running until the test ends.
func enroll(tb testing.TB) *enrolled {
	tb.Helper()
	f := newFleetd(tb)
	inst, err := swtpm.Start(context.Background(), tpmDir)
	must(tb, err)
	tb.Cleanup(func() { _ = inst.Stop() })
	must(tb, inst.ReplayEventLog(bootLog))
	root := tb.TempDir()
	logFile := filepath.Join(root, "binary_bios_measurements")
	must(tb, os.WriteFile(logFile, bootLog, 0o644))
	sysRoot, devRoot, err := fakehw.Write(filepath.Join(root, "hw"), fakehw.Machine{UUID: "4c4c4544-0042-3510-8052-b4c04f4e3232",
		Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{{Dev: "nvme0n1", Serial: diskSerial, Model: "Samsung_SSD_980_1TB", Bus: "nvme"}}})
	must(tb, err)
	wf := filepath.Join(root, "workflow")
	must(tb, os.Mkdir(wf, 0o755))
	err = agent.Enroll(context.Background(), agent.EnrollConfig{FleetdURL: f.url, Device: deviceName, TPM: inst.Spec(), EventLog: logFile,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, RetryWait: time.Millisecond, Log: zerolog.Nop()})
	if err != nil {
		tb.Fatalf("fleetd enroll: %v (exit %d)", err, agent.ExitCode(err))
	}
	return &enrolled{fleetd: f, tpm: inst, workflowDir: wf}
}

// file is the path of one of the files the agent wrote.
func (e *enrolled) file(name string) string { return filepath.Join(e.workflowDir, name) }

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

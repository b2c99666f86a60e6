package spire_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
)

const (
	deviceID   = 12
	deviceName = "node-a"
	diskSerial = "S4EWNX0R123456" // fleettest.Declared's disk_serial
	// request is the device's accepted owner request: a provision, the request that issues the
	// LDevID and the LAK (fleet/enroll_evidence.go).
	request = "provision-k3f9x2mq"
)

// bootLog is the firmware's event log the swtpm's PCRs are replayed from.
var bootLog = eventlogs.RHEL8SecureBoot

// fleetd is fleetd's enrollment in one process (handlers/handlerstest: the real handlers and
// fleet service on in-memory NetBox and Tinkerbell, with in-memory dev CAs). The EK policy is
// hash+cert with the swtpm EK CA, as for a fleet whose TPMs carry EK certificates. It records
// the last body of each enrollment route, so a benchmark can replay the exchange without the TPM.
type fleetd struct {
	inv           *fleettest.NetBox
	device        fleet.Device // as declared before the enrollment
	ldevidCA      *pki.CA
	ldevidCAFiles pki.CAFiles // ldevidCAFiles.Root is SPIRE's devid_ca_path
	ek            *attest.EKVerifier
	tokens        *attest.TokenSealer
	issuer        *pki.Issuer
	handler       http.Handler
	url           string
	service       *fleet.Service // the fleet service behind the handlers, for the owner's requests

	mu   sync.Mutex
	body map[string][]byte // route path → last request body
}

func newFleetd(tb testing.TB) *fleetd {
	tb.Helper()
	return newFleetdWith(tb, handlerstest.Config{})
}

// newFleetdWith is newFleetd with the certificate settings of hc (CertLifetime, RenewAfter) and
// its SPIRE server.
func newFleetdWith(tb testing.TB, hc handlerstest.Config) *fleetd {
	tb.Helper()
	d := fleettest.Declared(deviceID, deviceName)
	d.Declared.EKHashes = []string{tpm.EKSHA256}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: request, Workflow: deviceName + "-" + request}
	f := &fleetd{device: d, body: map[string][]byte{}}
	// A token lives an hour, so a benchmark can replay the recorded exchange for as long as it runs.
	ft := handlerstest.New(tb, handlerstest.Config{Devices: []fleet.Device{d}, EKPolicy: attest.EKPolicyHashCert,
		EKBundle: ekCA.BundlePEM(), TokenLifetime: time.Hour, CertLifetime: hc.CertLifetime, RenewAfter: hc.RenewAfter, SPIRE: hc.SPIRE,
		Wrap: func(h http.Handler) http.Handler { f.handler = h; return http.HandlerFunc(f.record) }})
	f.inv, f.ldevidCA, f.url, f.service = ft.Inv, ft.LDevIDCA, ft.URL, ft.Service
	f.ek, f.tokens, f.issuer = ft.Attest.EK, ft.Attest.Tokens, ft.Attest.Issuer
	var err error
	f.ldevidCAFiles, err = f.ldevidCA.WriteFiles(tb.TempDir(), "ldevid-ca")
	must(tb, err)
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
	eventLog    string // the boot's event log file, as the kernel exposes it
}

// enroll starts the swtpm as after a power-on, replays the boot log into its PCRs, and runs the
// real agent against it and fleetd. The swtpm keeps running until the test ends.
func enroll(tb testing.TB) *enrolled {
	tb.Helper()
	return enrollOn(tb, newFleetd(tb))
}

// enrollOn is enroll against f.
func enrollOn(tb testing.TB, f *fleetd) *enrolled {
	tb.Helper()
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
	err = agent.Enroll(context.Background(), agent.EnrollConfig{Conn: agent.Conn{FleetdURL: f.url, RetryWait: time.Millisecond}, Device: deviceName, Request: request, TPM: inst.Spec(), EventLog: logFile,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, Log: zerolog.Nop()})
	if err != nil {
		tb.Fatalf("fleetd enroll: %v (exit %d)", err, agent.ExitCode(err))
	}
	return &enrolled{fleetd: f, tpm: inst, workflowDir: wf, eventLog: logFile}
}

// file is the path of one of the files the agent wrote.
func (e *enrolled) file(name string) string { return filepath.Join(e.workflowDir, name) }

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// fakeReceipts stands in for the domain's part of the receipt route (handlers.WipeReceipts): it
// keeps what the handler handed it and answers what the row says.
type fakeReceipts struct {
	mu       sync.Mutex
	recorded []attest.VerifiedReceipt
	refused  []attest.RefusedReceipt
	record   func(n int) error // the answer to the n-th record (1-based); nil: recorded
}

func (f *fakeReceipts) RecordWipeReceipt(_ context.Context, r attest.VerifiedReceipt) (fleet.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recorded = append(f.recorded, r)
	out := fleet.Outcome{Device: r.Device, DeviceID: r.DeviceID, Action: fleet.Action(r.Action), Step: "receipt", Result: "recorded"}
	if f.record != nil {
		if err := f.record(len(f.recorded)); err != nil {
			out.Result = "refused"
			return out, err
		}
	}
	return out, nil
}

func (f *fakeReceipts) RefusedWipeReceipt(_ context.Context, r attest.RefusedReceipt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, r)
	return nil
}

func (f *fakeReceipts) calls() (recorded, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recorded), len(f.refused)
}

var (
	receiptDisk  = fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	receiptOther = fakehw.Disk{Dev: "sda", Serial: "WD-WCC4N1234", Model: "WDC_WD40EFRX", Bus: "ata"}
)

// wipedMachine is a machine whose wipe (or retirement) the real agent enrolled against the
// real handlers and service, on the TPM simulator: its Workflow directory holds what the
// receipt step reads.
type wipedMachine struct {
	f  *handlerstest.Fleetd
	ch channel
	wf string
}

func wipeEnrolled(t *testing.T, sim *simulator.Simulator, action fleet.Action, receipts *fakeReceipts, now func() time.Time) *wipedMachine {
	t.Helper()
	log := eventlogs.Ubuntu2104NoSecureBoot
	if err := swtpm.ReplayEventLog(sim, log); err != nil {
		t.Fatal(err)
	}
	ch := channel{ReadWriter: sim, log: log}
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
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: string(action) + "-k3f9x2mq", Workflow: "node-a-" + string(action) + "-k3f9x2mq",
		LDevIDSerial: "0a1b", LAKSerial: "0c2d"} // the node's certificates, until its wipe is recorded
	if action == fleet.ActionRetire {
		d.Status = fleet.StatusDecommissioning
	}
	var wr handlers.WipeReceipts // a nil *fakeReceipts would not be a nil interface
	if receipts != nil {
		wr = receipts
	}
	f := handlerstest.New(t, handlerstest.Config{Catalog: catalog(fleet.SecureBootAny), Devices: []fleet.Device{d}, Receipts: wr, Now: now})
	sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{receiptDisk, receiptOther}})
	if err != nil {
		t.Fatal(err)
	}
	wf := t.TempDir()
	err = agent.Enroll(context.Background(), agent.EnrollConfig{Conn: agent.Conn{FleetdURL: f.URL, RetryWait: time.Millisecond}, Device: "node-a",
		Request: d.Owned.Request, Channel: ch, SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("enroll the %s: %v", action, err)
	}
	return &wipedMachine{f: f, ch: ch, wf: wf}
}

// report writes the wipe program's wipe-result.
func (m *wipedMachine) report(t *testing.T, serial, result string) {
	t.Helper()
	body := fmt.Sprintf("serial=%s\nmethod=blkdiscard\nresult=%s\nbytes=1000204886016\n", serial, result)
	if err := os.WriteFile(filepath.Join(m.wf, agent.FileWipeResult), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (m *wipedMachine) receipt(retries int) error {
	return agent.WipeReceipt(context.Background(), agent.WipeReceiptConfig{Conn: agent.Conn{FleetdURL: m.f.URL, RetryWait: time.Millisecond, Retries: retries},
		Channel: m.ch, WorkflowDir: m.wf, Log: zerolog.Nop()})
}

// TestWipeReceipt runs the receipt step end to end: the real agent enrolls a wipe (or a
// retirement) on the TPM simulator against the real handlers and service, the wipe program's
// report is written, and `fleetd wipe-receipt` quotes it with the attestation's AK and sends it.
// The route verifies it (attest) and hands the domain (a fake here) a verified receipt only;
// a receipt the machine's TPM signed that does not confirm the erase reaches it as a refusal.
func TestWipeReceipt(t *testing.T) {
	inventoryDown := fmt.Errorf("read node-a: %w", fleet.ErrNetBoxUnavailable)
	rows := []struct {
		name            string
		action          fleet.Action
		serial, result  string
		record          func(n int) error
		twice           bool
		retries         int
		wantExit        int
		wantCode        string // the refusal's code, for exit 3
		recorded, refus int    // calls of the domain's two methods
	}{
		{name: "ok/wipe: the verified receipt reaches the domain", action: fleet.ActionWipe, serial: receiptDisk.Serial, result: "erased", recorded: 1},
		{name: "ok/retirement", action: fleet.ActionRetire, serial: receiptDisk.Serial, result: "erased", recorded: 1},
		{name: "refuse/the wipe program reports failure: signed, journaled by the domain, not recorded", action: fleet.ActionWipe,
			serial: receiptDisk.Serial, result: "failed", wantExit: agent.ExitRefused, wantCode: "receipt_wipe_failed", refus: 1},
		{name: "refuse/the wipe program reports another disk", action: fleet.ActionWipe, serial: receiptOther.Serial, result: "erased",
			wantExit: agent.ExitRefused, wantCode: "receipt_wrong_disk", refus: 1},
		// A replayed receipt verifies again in attest; the domain refuses it, as its request has
		// ended: the route answers the domain's refusal.
		{name: "refuse/replayed: the domain refuses the second", action: fleet.ActionWipe, serial: receiptDisk.Serial, result: "erased", twice: true,
			record: func(n int) error {
				if n > 1 {
					return fleet.Refuse(fleet.RefusedConflict, "receipt_request_ended", "node-a's wipe request wipe-k3f9x2mq has ended")
				}
				return nil
			}, wantExit: agent.ExitRefused, wantCode: "receipt_request_ended", recorded: 2},
		{name: "refuse/NetBox down: 503, retried, then the agent gives up", action: fleet.ActionWipe, serial: receiptDisk.Serial, result: "erased",
			record: func(int) error { return inventoryDown }, retries: 2, wantExit: agent.ExitFleetd, recorded: 3},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			sim, err := simulator.Get()
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			fake := &fakeReceipts{record: r.record}
			m := wipeEnrolled(t, sim, r.action, fake, nil)
			m.report(t, r.serial, r.result)
			err = m.receipt(r.retries)
			if r.twice && err == nil {
				err = m.receipt(r.retries)
			}
			if code := agent.ExitCode(err); code != r.wantExit {
				t.Fatalf("wipe-receipt exit %d (%v), want %d", code, err, r.wantExit)
			}
			var refused *agent.RefusedError
			if r.wantCode != "" && (!errors.As(err, &refused) || refused.Code != r.wantCode || refused.Message != fleet.PublicSentence(r.wantCode)) {
				t.Errorf("refusal %v, want %s with its fixed sentence", err, r.wantCode)
			}
			recorded, refus := fake.calls()
			if recorded != r.recorded || refus != r.refus {
				t.Fatalf("the domain was asked to record %d and told of %d refused receipts, want %d and %d", recorded, refus, r.recorded, r.refus)
			}
			if recorded > 0 {
				v := fake.recorded[0]
				want := attest.WipeReport{DiskSerial: r.serial, Method: "blkdiscard", Result: "erased", Bytes: 1000204886016}
				if v.Device != "node-a" || v.DeviceID != 12 || v.Request != string(r.action)+"-k3f9x2mq" || v.Action != string(r.action) || v.Report != want {
					t.Errorf("the domain got %+v, want node-a's %s request with the report %+v", v.Receipt, r.action, want)
				}
			}
			if refus > 0 && fake.refused[0].Refusal.Check != attest.Check(r.wantCode) {
				t.Errorf("the domain was told of refusal %s, want %s", fake.refused[0].Refusal.Check, r.wantCode)
			}
		})
	}
}

// TestReceiptFilesOnlyForAWipe: the enrollment of a provision or an attest hands out no receipt
// grant and the agent keeps no AK for one; a wipe's or a retirement's does.
func TestReceiptFilesOnlyForAWipe(t *testing.T) {
	for _, a := range []fleet.Action{fleet.ActionProvision, fleet.ActionAttest, fleet.ActionWipe} {
		t.Run(string(a), func(t *testing.T) {
			sim, err := simulator.Get()
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			m := wipeEnrolled(t, sim, a, nil, nil)
			for _, name := range []string{agent.FileReceipt, agent.FileReceiptAK} {
				st, err := os.Stat(filepath.Join(m.wf, name))
				if kept := err == nil; kept != (a == fleet.ActionWipe) || kept && st.Mode().Perm() != 0o600 {
					t.Errorf("%s kept = %v (%v), want %v with mode 0600", name, kept, err, a == fleet.ActionWipe)
				}
			}
		})
	}
}

// TestReceiptTokenFirst: a receipt must begin with its device and token, and the token is
// authenticated before anything else of the body is read or the domain asked: each refusal below
// reaches neither of the domain's methods, and one whose body is left unread closes the
// connection.
func TestReceiptTokenFirst(t *testing.T) {
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	clock := &offsetClock{}
	fake := &fakeReceipts{}
	m := wipeEnrolled(t, sim, fleet.ActionWipe, fake, clock.Now)
	var grant struct{ Token string }
	if b, err := os.ReadFile(filepath.Join(m.wf, agent.FileReceipt)); err != nil || json.Unmarshal(b, &grant) != nil {
		t.Fatalf("receipt.json: %v", err)
	}
	good := grant.Token
	enrollment, err := m.f.Attest.Tokens.Seal(attest.TokenClaims{DeviceID: 12, Device: "node-a", Request: "wipe-k3f9x2mq"})
	if err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name, body string
		code       string
		later      time.Duration // the clock moved on
	}{
		{name: "refuse/a junk token", body: `{"device": "node-a", "token": "AQID"}`, code: "receipt_token_invalid"},
		{name: "refuse/an enrollment token", body: `{"device": "node-a", "token": "` + enrollment + `"}`, code: "receipt_token_invalid"},
		{name: "refuse/an expired receipt token", body: `{"device": "node-a", "token": "` + good + `"}`, later: 2 * time.Hour, code: "receipt_expired"},
		{name: "refuse/another device named", body: `{"device": "node-b", "token": "` + good + `"}`, code: "receipt_token_mismatch"},
		{name: "refuse/the token after another member", body: `{"device": "node-a", "method": "x", "token": "` + good + `"}`, code: "malformed"},
		{name: "refuse/no token within the first 8 KiB", body: `{"device": "` + strings.Repeat("x", 9<<10) + `", "token": "` + good + `"}`, code: "malformed"},
		// A token that opens lets the body be read, decoded strictly and verified.
		{name: "ok/read on: an unknown member", body: `{"device": "node-a", "token": "` + good + `", "colour": "red"}`, code: "malformed"},
		{name: "ok/read on: no quote", body: `{"device": "node-a", "token": "` + good + `", "request": "wipe-k3f9x2mq", "disk_serial": "S4EWNX0R123456",
			"method": "blkdiscard", "result": "erased", "bytes": 1, "quote": {"quote": "", "signature": ""}}`, code: "receipt_malformed"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			clock.advance(r.later)
			defer clock.advance(-r.later)
			resp, err := http.Post(m.f.URL+api.PathWipeReceipt, "application/json", strings.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code != r.code || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%d %+v (%v), want 400 %s", resp.StatusCode, e, err, r.code)
			}
			if recorded, refused := fake.calls(); recorded+refused != 0 {
				t.Errorf("the domain was asked %d times", recorded+refused)
			}
			if unread := resp.Close; unread != strings.HasPrefix(r.name, "refuse/") {
				t.Errorf("connection closed after the answer: %v, want it closed for a body refused unread", unread)
			}
		})
	}
}

// TestReceiptRouteNotConfigured: a fleetd wired without the domain's part answers 503
// not_configured, unread, rather than verify receipts it cannot record.
func TestReceiptRouteNotConfigured(t *testing.T) {
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fleettest.Declared(12, "node-a")}, NoReceipts: true})
	resp, err := http.Post(f.URL+api.PathWipeReceipt, "application/json", strings.NewReader(`{"device": "node-a", "token": "AQID"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusServiceUnavailable || e.Code != "not_configured" {
		t.Errorf("%d %+v (%v), want 503 not_configured", resp.StatusCode, e, err)
	}
}

// TestWipeReceiptRecorded runs the receipt step against the service as fleetd serve wires it: the
// real agent enrolls the wipe (retirement) on the TPM simulator and sends its receipt, which
// records the device wiped (retired) before the answer; the same receipt sent again, or a receipt
// whose request is no longer the device's, is answered 409 receipt_request_ended and writes
// nothing; a receipt the TPM signed over another disk is journaled and leaves the device wiping.
func TestWipeReceiptRecorded(t *testing.T) {
	rows := []struct {
		name           string
		action         fleet.Action
		serial         string
		between        func(f *handlerstest.Fleetd) // after the enrollment, before the receipt
		twice          bool
		wantExit       int
		wantCode       string
		state          fleet.State
		status         fleet.Status
		journal        string // the last journal entry begins so
		certsCleared   bool
		writesReceipts int // NetBox saves by the receipt step
	}{
		{name: "ok/wipe: recorded wiped before the answer", action: fleet.ActionWipe, serial: receiptDisk.Serial,
			state: fleet.StateWiped, status: fleet.StatusOffline, journal: "success: wipe request wipe-k3f9x2mq: the machine's TPM confirmed the erase of disk " + receiptDisk.Serial + " (method blkdiscard, 1000204886016 bytes)",
			certsCleared: true, writesReceipts: 1},
		{name: "ok/retirement: recorded retired, decommissioning kept", action: fleet.ActionRetire, serial: receiptDisk.Serial,
			state: fleet.StateRetired, status: fleet.StatusDecommissioning, journal: "success: retire request retire-k3f9x2mq: the machine's TPM confirmed", certsCleared: true, writesReceipts: 1},
		{name: "refuse/replayed: the second is refused by the request, which ended with the first", action: fleet.ActionWipe, serial: receiptDisk.Serial, twice: true,
			wantExit: agent.ExitRefused, wantCode: fleet.CodeReceiptRequestEnded,
			state: fleet.StateWiped, status: fleet.StatusOffline, journal: "success: wipe request wipe-k3f9x2mq:", certsCleared: true, writesReceipts: 1},
		{name: "refuse/the device is on another request: nothing recorded", action: fleet.ActionWipe, serial: receiptDisk.Serial,
			between: func(f *handlerstest.Fleetd) {
				d := f.Inv.Get(12)
				d.Owned.Request, d.Owned.Workflow = "wipe-zzzzzzzz", "node-a-wipe-zzzzzzzz"
				f.Inv.Set(d)
			}, wantExit: agent.ExitRefused, wantCode: fleet.CodeReceiptRequestEnded, state: fleet.StateWiping, status: fleet.StatusPlanned, journal: "success: Attested node-a"},
		{name: "refuse/another disk: journaled, the device stays wiping", action: fleet.ActionWipe, serial: receiptOther.Serial,
			wantExit: agent.ExitRefused, wantCode: string(attest.CheckReceiptDisk), state: fleet.StateWiping, status: fleet.StatusPlanned,
			journal: "warning: The wipe receipt of node-a was refused (receipt_wrong_disk): " + fleet.PublicSentence(string(attest.CheckReceiptDisk))},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			sim, err := simulator.Get()
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			m := wipeEnrolled(t, sim, r.action, nil, nil)
			if r.between != nil {
				r.between(m.f)
			}
			saves := len(m.f.Inv.Changes(12))
			m.report(t, r.serial, "erased")
			err = m.receipt(0)
			if r.twice && err == nil {
				err = m.receipt(0)
			}
			if code := agent.ExitCode(err); code != r.wantExit {
				t.Fatalf("wipe-receipt exit %d (%v), want %d", code, err, r.wantExit)
			}
			var refused *agent.RefusedError
			if r.wantCode != "" && (!errors.As(err, &refused) || refused.Code != r.wantCode || refused.Message != fleet.PublicSentence(r.wantCode)) {
				t.Errorf("refusal %v, want %s with its fixed sentence", err, r.wantCode)
			}
			d := m.f.Inv.Get(12)
			if d.Owned.State != r.state || d.Status != r.status {
				t.Errorf("fleet_state %s status %s (%s), want %s %s", d.Owned.State, d.Status, d.Owned.Message, r.state, r.status)
			}
			if cleared := d.Owned.LDevIDSerial == "" && d.Owned.LAKSerial == ""; cleared != r.certsCleared {
				t.Errorf("certificate serials cleared = %v, want %v", cleared, r.certsCleared)
			}
			if n := len(m.f.Inv.Changes(12)) - saves; n != r.writesReceipts {
				t.Errorf("the receipt step saved the device %d times, want %d", n, r.writesReceipts)
			}
			j := m.f.Inv.JournalOf(12)
			if len(j) == 0 || !strings.HasPrefix(j[len(j)-1], r.journal) {
				t.Errorf("journal %q, want its last entry to begin %q", j, r.journal)
			}
		})
	}
}

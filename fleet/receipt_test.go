package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// wipingNode is node-a wiping for request (a wipe's or a retirement's), its attestation recorded
// and its node's certificates still on it.
func wipingNode(request string) fleet.Device {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusActive
	if fleet.RequestAction(request) == fleet.ActionRetire {
		d.Status = fleet.StatusDecommissioning
	}
	d.Owned = fleet.Owned{State: fleet.StateWiping, Request: request, Workflow: fleet.WorkflowName("node-a", request),
		Message: "Attested node-a for " + request + ".", LDevIDSerial: "0a1b", LAKSerial: "0c2d"}
	return d
}

// receiptOf is the receipt attest verified for d's request (attest.TestReceipt proves what makes
// one): the declared disk erased, quoted by the attestation's AK.
func receiptOf(d fleet.Device, request string) attest.VerifiedReceipt {
	return attest.VerifiedReceipt{Receipt: attest.Receipt{DeviceID: d.ID, Device: d.Name, Request: request,
		Action: string(fleet.RequestAction(request)), AKSHA256: strings.Repeat("ab", 32), AttestedAt: testEpoch,
		Report: attest.WipeReport{DiskSerial: d.Declared.DiskSerial, Method: "blkdiscard", Result: attest.WipeResultErased, Bytes: 1000204886016}}}
}

// TestRecordWipeReceipt: a verified receipt of the device's running wipe (retirement) records it
// wiped (retired) with the effects a wipe's end has (status, certificates cleared, a success
// entry); a receipt of any other request, or of this one once it ended — a replay — is refused
// receipt_request_ended and writes nothing.
func TestRecordWipeReceipt(t *testing.T) {
	ctx := context.Background()
	const wipe, retire = "wipe-aaaaaaaa", "retire-aaaaaaaa"
	rows := []struct {
		name    string
		device  func() fleet.Device
		request string // the receipt's
		before  func(inv *fleettest.NetBox, s testService)
		// want: the state and status after; code "" for recorded
		state  fleet.State
		status fleet.Status
		code   string
		errIs  error // an error that is not a refusal
		others int   // saves by another writer during the decision
	}{
		{name: "ok/wipe: wiped, offline, certificates cleared", device: func() fleet.Device { return wipingNode(wipe) }, request: wipe,
			state: fleet.StateWiped, status: fleet.StatusOffline},
		{name: "ok/retirement: retired, decommissioning kept, certificates cleared", device: func() fleet.Device { return wipingNode(retire) }, request: retire,
			state: fleet.StateRetired, status: fleet.StatusDecommissioning},
		{name: "ok/a wipe the owner decommissioned meanwhile keeps decommissioning", request: wipe,
			device: func() fleet.Device { d := wipingNode(wipe); d.Status = fleet.StatusDecommissioning; return d },
			state:  fleet.StateWiped, status: fleet.StatusDecommissioning},
		{name: "refuse/replayed: the same receipt once recorded", device: func() fleet.Device { return wipingNode(wipe) }, request: wipe,
			before: func(_ *fleettest.NetBox, s testService) {
				if _, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(wipingNode(wipe), wipe)); err != nil {
					panic(err)
				}
			}, state: fleet.StateWiped, status: fleet.StatusOffline, code: fleet.CodeReceiptRequestEnded},
		{name: "refuse/another request's receipt: the device wipes for a newer one", device: func() fleet.Device { return wipingNode("wipe-bbbbbbbb") }, request: wipe,
			state: fleet.StateWiping, status: fleet.StatusActive, code: fleet.CodeReceiptRequestEnded},
		{name: "refuse/the request ended unconfirmed before its receipt came", request: wipe,
			device: func() fleet.Device {
				d := wipingNode(wipe)
				d.Owned.State, d.Status, d.Owned.LDevIDSerial, d.Owned.LAKSerial = fleet.StateUnconfirmed, fleet.StatusFailed, "", ""
				return d
			}, state: fleet.StateUnconfirmed, status: fleet.StatusFailed, code: fleet.CodeReceiptRequestEnded},
		{name: "refuse/the request failed", request: wipe,
			device: func() fleet.Device {
				d := wipingNode(wipe)
				d.Owned.State, d.Status = fleet.StateFailed, fleet.StatusFailed
				return d
			},
			state: fleet.StateFailed, status: fleet.StatusFailed, code: fleet.CodeReceiptRequestEnded},
		{name: "refuse/the request is still pending (no attestation recorded)", request: wipe,
			device: func() fleet.Device { d := wipingNode(wipe); d.Owned.State = fleet.StatePending; return d },
			state:  fleet.StatePending, status: fleet.StatusActive, code: fleet.CodeReceiptRequestEnded},
		{name: "refuse/another instance recorded it first: the conflict's re-read finds it wiped", device: func() fleet.Device { return wipingNode(wipe) }, request: wipe,
			before: func(inv *fleettest.NetBox, _ testService) {
				inv.ConflictOnce[12] = func(d *fleet.Device) { d.Owned.State, d.Status = fleet.StateWiped, fleet.StatusOffline }
			}, state: fleet.StateWiped, status: fleet.StatusOffline, code: fleet.CodeReceiptRequestEnded, others: 1},
		{name: "refuse/NetBox fails the write: an inventory error, nothing recorded", device: func() fleet.Device { return wipingNode(wipe) }, request: wipe,
			before: func(inv *fleettest.NetBox, _ testService) {
				inv.FailUpdates(func(int64, fleet.Patch) (bool, error) { return false, errors.New("502 Bad Gateway") })
			}, state: fleet.StateWiping, status: fleet.StatusActive, errIs: fleet.ErrNetBoxUnavailable},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			d := r.device()
			inv := fleettest.NewNetBox(d)
			s := newRegisteredService(inv, reg, fleettest.SealKeys())
			if r.before != nil {
				r.before(inv, s)
			}
			saves, entries := len(inv.Changes(12)), len(inv.JournalOf(12))
			out, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, r.request))
			got := inv.Get(12)
			if got.Owned.State != r.state || got.Status != r.status {
				t.Errorf("fleet_state %s status %s (%s), want %s %s", got.Owned.State, got.Status, got.Owned.Message, r.state, r.status)
			}
			switch {
			case r.errIs != nil:
				if _, refused := fleet.AsRefusal(err); refused || !errors.Is(err, r.errIs) {
					t.Fatalf("error %v, want one wrapping %v", err, r.errIs)
				}
				if gauge(t, reg, "fleetd_wipe_receipts_total", "error") != 1 {
					t.Error("fleetd_wipe_receipts_total{outcome=error} is not 1")
				}
			case r.code != "":
				if rf, ok := fleet.AsRefusal(err); !ok || rf.Code != r.code || rf.Class != fleet.RefusedConflict {
					t.Fatalf("error %v, want the refusal %s (409)", err, r.code)
				}
				if out.Result != "refused" || out.Check != r.code {
					t.Errorf("outcome %+v, want refused %s", out, r.code)
				}
				if n := len(inv.Changes(12)) - saves - r.others; n != 0 || len(inv.JournalOf(12)) != entries {
					t.Errorf("a refused receipt wrote %d saves and journal %q", n, inv.JournalOf(12)[entries:])
				}
				if gauge(t, reg, "fleetd_wipe_receipts_total", r.code) != 1 {
					t.Errorf("fleetd_wipe_receipts_total{outcome=%s} is not 1", r.code)
				}
			default:
				if err != nil || out.Result != fleet.ReceiptRecorded || out.Step != "receipt" {
					t.Fatalf("outcome %+v, %v; want recorded", out, err)
				}
				if got.Owned.LDevIDSerial != "" || got.Owned.LAKSerial != "" {
					t.Errorf("ldevid_serial %q lak_serial %q, want both cleared", got.Owned.LDevIDSerial, got.Owned.LAKSerial)
				}
				j := inv.JournalOf(12)
				want := fmt.Sprintf("success: %s request %s: the machine's TPM confirmed the erase of disk S4EWNX0R123456 (method blkdiscard, 1000204886016 bytes)",
					fleet.RequestAction(r.request), r.request)
				if len(j) != entries+1 || !strings.HasPrefix(j[len(j)-1], want) || !strings.Contains(got.Owned.Message, "confirmed the erase") {
					t.Errorf("journal %q, message %q; want one entry %q…", j, got.Owned.Message, want)
				}
				end := map[fleet.Action]string{fleet.ActionWipe: "the device is wiped; its certificates are no longer accepted.",
					fleet.ActionRetire: "the device is retired; its certificates are no longer accepted."}[fleet.RequestAction(r.request)]
				if !strings.HasSuffix(got.Owned.Message, end) {
					t.Errorf("message %q, want it to end %q", got.Owned.Message, end)
				}
				if gauge(t, reg, "fleetd_wipe_receipts_total", fleet.ReceiptRecorded) != 1 {
					t.Error("fleetd_wipe_receipts_total{outcome=recorded} is not 1")
				}
			}
		})
	}
}

// TestReceiptReplayAfterAnEditorsRevert: an editor who sets a wiped device back to wiping (to
// have a replayed receipt recorded again) does not get it: the receipt's decision reads the
// device on fleetd's own values (its write of wiped is put back first) and refuses the replay.
func TestReceiptReplayAfterAnEditorsRevert(t *testing.T) {
	ctx := context.Background()
	d := wipingNode("wipe-aaaaaaaa")
	inv := fleettest.NewNetBox(d)
	s := newRegisteredService(inv, prometheus.NewRegistry(), fleettest.SealKeys())
	if _, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, d.Owned.Request)); err != nil {
		t.Fatal(err)
	}
	inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned.State = fleet.StateWiping })
	_, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, d.Owned.Request))
	if rf, ok := fleet.AsRefusal(err); !ok || rf.Code != fleet.CodeReceiptRequestEnded {
		t.Fatalf("the replay after the revert: %v, want %s", err, fleet.CodeReceiptRequestEnded)
	}
	if got := inv.Get(12); got.Owned.State != fleet.StateWiped {
		t.Errorf("fleet_state %s, want fleetd's wiped put back", got.Owned.State)
	}
	recorded := 0
	for _, e := range inv.JournalOf(12) {
		if strings.Contains(e, "confirmed the erase") {
			recorded++
		}
	}
	if recorded != 1 {
		t.Errorf("the receipt is journaled recorded %d times, want once: %q", recorded, inv.JournalOf(12))
	}
}

// TestWipeEndsOnItsReceipt: the Workflow's success ends the request only when no receipt was
// recorded (unconfirmed: a danger entry, the gauge, and the owner's request taken again); after a
// recorded receipt it changes nothing.
func TestWipeEndsOnItsReceipt(t *testing.T) {
	ctx := context.Background()
	succeeded := func(d fleet.Device) fleet.WorkflowStatus {
		return fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowSucceeded}
	}
	// The Workflow's end after the receipt: its success, or its failure when the receipt step's
	// retry after a lost answer was refused receipt_request_ended.
	for _, phase := range []fleet.WorkflowPhase{fleet.WorkflowSucceeded, fleet.WorkflowFailed} {
		t.Run("ok/the receipt, then the Workflow "+string(phase)+": wiped once", func(t *testing.T) {
			d := wipingNode("wipe-aaaaaaaa")
			inv := fleettest.NewNetBox(d)
			s := newRegisteredService(inv, prometheus.NewRegistry(), fleettest.SealKeys())
			if _, err := s.Requests.RecordWipeReceipt(ctx, receiptOf(d, d.Owned.Request)); err != nil {
				t.Fatal(err)
			}
			saves := len(inv.Changes(12))
			ws := fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: phase, FailedAction: map[bool]string{true: "wipe-receipt"}[phase == fleet.WorkflowFailed]}
			if out, err := s.Requests.WorkflowChanged(ctx, 12, ws); err != nil || out.Result != "no-change" {
				t.Fatalf("the Workflow %s after the receipt: %+v, %v; want no change", phase, out, err)
			}
			if got := inv.Get(12); got.Owned.State != fleet.StateWiped || len(inv.Changes(12)) != saves || len(inv.JournalOf(12)) != 1 {
				t.Errorf("fleet_state %s, %d more saves, journal %q; want wiped as the receipt left it", got.Owned.State, len(inv.Changes(12))-saves, inv.JournalOf(12))
			}
		})
	}
	for _, r := range []struct {
		name, request string
		status        fleet.Status
		again         func(d *fleet.Device) // the owner's new request
		wantAgain     fleet.Action
	}{
		{"refuse/a wipe's Workflow succeeded with no receipt: unconfirmed; ok/the owner asks again", "wipe-aaaaaaaa", fleet.StatusFailed,
			func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe }, fleet.ActionWipe},
		{"refuse/a retirement's Workflow succeeded with no receipt: unconfirmed; ok/desired_action wipe retires again", "retire-aaaaaaaa", fleet.StatusDecommissioning,
			func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe }, fleet.ActionRetire},
		{"refuse/a wipe unconfirmed; ok/the owner provisions instead", "wipe-aaaaaaaa", fleet.StatusStaged,
			func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionProvision }, fleet.ActionProvision},
	} {
		t.Run(r.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			d := wipingNode(r.request)
			inv := fleettest.NewNetBox(d)
			s := newRegisteredService(inv, reg, fleettest.SealKeys())
			out, err := s.Requests.WorkflowChanged(ctx, 12, succeeded(d))
			if err != nil || out.Result != string(fleet.StateUnconfirmed) {
				t.Fatalf("the Workflow's success: %+v, %v; want unconfirmed", out, err)
			}
			got := inv.Get(12)
			wantStatus := map[fleet.Action]fleet.Status{fleet.ActionWipe: fleet.StatusFailed, fleet.ActionRetire: fleet.StatusDecommissioning}[fleet.RequestAction(r.request)]
			if got.Owned.State != fleet.StateUnconfirmed || got.Status != wantStatus || got.Owned.LAKSerial != "" || got.Owned.LDevIDSerial != "" {
				t.Errorf("fleet_state %s status %s ldevid %q lak %q, want unconfirmed %s with the certificates cleared",
					got.Owned.State, got.Status, got.Owned.LDevIDSerial, got.Owned.LAKSerial, wantStatus)
			}
			j := inv.JournalOf(12)
			if len(j) != 1 || !strings.HasPrefix(j[0], "danger: "+string(fleet.RequestAction(r.request))+" request "+r.request+" unconfirmed") ||
				!strings.Contains(j[0], "no receipt from the machine's TPM") || !strings.Contains(j[0], "disk S4EWNX0R123456") {
				t.Errorf("journal %q, want one danger entry saying the erase was not confirmed", j)
			}
			if n := labelled(t, reg, "fleetd_requests_total", "action", string(fleet.RequestAction(r.request)), "result", string(fleet.StateUnconfirmed)); n != 1 {
				t.Errorf("fleetd_requests_total{result=unconfirmed} = %v, want 1", n)
			}
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			if n := gauge(t, reg, "fleetd_unconfirmed_devices"); n != 1 {
				t.Errorf("fleetd_unconfirmed_devices = %v after a listing, want 1", n)
			}
			inv.WriteAs(fleettest.Owner, 12, r.again)
			if out, err := s.Requests.Reconcile(ctx, 12); err != nil || out.Result != "accepted" {
				t.Fatalf("the owner's new request on the unconfirmed device: %+v, %v; want accepted", out, err)
			}
			if got := inv.Get(12); got.Owned.State != fleet.StatePending || fleet.RequestAction(got.Owned.Request) != r.wantAgain || got.Owned.Request == r.request {
				t.Errorf("after the owner's request: fleet_state %s request %s, want a new %s request pending", got.Owned.State, got.Owned.Request, r.wantAgain)
			}
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			if n := gauge(t, reg, "fleetd_unconfirmed_devices"); n != 0 {
				t.Errorf("fleetd_unconfirmed_devices = %v once the owner asked again, want 0", n)
			}
		})
	}
}

// TestRefusedWipeReceipt: a receipt the machine's TPM signed that does not confirm the erase is
// journaled on the device (a warning with its code and fixed sentence, never the report's text),
// once per request and code, while its request runs; nothing else is written and the device stays
// wiping. The Workflow's failure that follows names the refusal.
func TestRefusedWipeReceipt(t *testing.T) {
	ctx := context.Background()
	refused := func(d fleet.Device, request string, check attest.Check) attest.RefusedReceipt {
		r := receiptOf(d, request).Receipt
		r.Report.DiskSerial = "EVIL\u202eSERIAL"
		return attest.RefusedReceipt{Receipt: r, Refusal: &attest.Refusal{Check: check, Msg: "the wipe program reported disk serial \"EVIL\u202eSERIAL\""}}
	}
	t.Run("ok/journaled once, counted each time, nothing else written", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		d := wipingNode("wipe-aaaaaaaa")
		inv := fleettest.NewNetBox(d)
		s := newRegisteredService(inv, reg, fleettest.SealKeys())
		saves := len(inv.Changes(12))
		for range 3 {
			if err := s.Requests.RefusedWipeReceipt(ctx, refused(d, d.Owned.Request, attest.CheckReceiptDisk)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Requests.RefusedWipeReceipt(ctx, refused(d, d.Owned.Request, attest.CheckReceiptWipeFailed)); err != nil {
			t.Fatal(err)
		}
		j := inv.JournalOf(12)
		want := "warning: The wipe receipt of node-a was refused (receipt_wrong_disk): " + fleet.PublicSentence("receipt_wrong_disk")
		if len(j) != 2 || !strings.HasPrefix(j[0], want) || !strings.Contains(j[1], "(receipt_wipe_failed)") || strings.Contains(strings.Join(j, " "), "EVIL") {
			t.Errorf("journal %q, want one warning per code, %q first, and nothing the report said", j, want)
		}
		if got := inv.Get(12); got.Owned.State != fleet.StateWiping || len(inv.Changes(12)) != saves || got.Owned.LAKSerial == "" {
			t.Errorf("fleet_state %s, %d saves, lak_serial %q: want the device untouched, still wiping", got.Owned.State, len(inv.Changes(12))-saves, got.Owned.LAKSerial)
		}
		if n := gauge(t, reg, "fleetd_wipe_receipts_total", "receipt_wrong_disk"); n != 3 {
			t.Errorf("fleetd_wipe_receipts_total{outcome=receipt_wrong_disk} = %v, want 3", n)
		}
		out, err := s.Requests.WorkflowChanged(ctx, 12, fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowFailed, FailedAction: "wipe-receipt"})
		if err != nil || out.Result != string(fleet.StateFailed) {
			t.Fatalf("the Workflow's failure: %+v, %v", out, err)
		}
		if msg := inv.Get(12).Owned.Message; !strings.Contains(msg, "at action wipe-receipt") || !strings.Contains(msg, "The wipe receipt of node-a was refused (receipt_wipe_failed)") {
			t.Errorf("fleet_message %q, want the failure at the receipt step with the last refusal", msg)
		}
	})
	t.Run("ok/not journaled once the request is not running", func(t *testing.T) {
		d := wipingNode("wipe-aaaaaaaa")
		inv := fleettest.NewNetBox(d)
		s := newRegisteredService(inv, prometheus.NewRegistry(), fleettest.SealKeys())
		if err := s.Requests.RefusedWipeReceipt(ctx, refused(d, "wipe-bbbbbbbb", attest.CheckReceiptBoot)); err != nil {
			t.Fatal(err)
		}
		if j := inv.JournalOf(12); len(j) != 0 {
			t.Errorf("journal %q for another request's refused receipt, want none", j)
		}
	})
}

// labelled is the value of name's series whose labels include the given name, value pairs.
func labelled(t *testing.T, reg *prometheus.Registry, name string, pairs ...string) float64 {
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
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				if have[pairs[i]] != pairs[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, pairs)
	return 0
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/attest"
)

// Wipe receipts in the domain (docs/design.md §2, the states; docs/http.md, "Wipe receipts"). A
// wipe or a retirement is recorded done only on the machine's TPM's word: a verified receipt of
// the device's running request (attest.VerifyReceipt judged the quote; RecordWipeReceipt judges
// the request) moves it from wiping to wiped (retired), and a Workflow reported successful with
// no receipt recorded ends it unconfirmed (lifecycle.go). The receipt step posts the receipt and
// waits for the answer before its action exits, so a receipt is recorded before its Workflow can
// end: the Workflow's success then finds the request over and changes nothing.

// CodeReceiptRequestEnded is the refusal of a verified receipt whose request is not the device's
// running wipe or retirement: it was recorded before (a replay), the request ended, or the device
// is on another request. Nothing is written.
const CodeReceiptRequestEnded = "receipt_request_ended"

// ReceiptRecorded is the outcome (and the route's answer) of a receipt that recorded the device
// wiped or retired.
const ReceiptRecorded = "recorded"

// receiptMetrics count the receipts that reach the domain, which are all signed by the attested
// machine's TPM (a receipt refused before its signature verified proves nothing and costs the
// route's decision line only), and the devices a listing found unconfirmed.
type receiptMetrics struct {
	receipts    *prometheus.CounterVec
	unconfirmed prometheus.Gauge
}

// journaledReceipts is, per device, the request and code of the last refused receipt journaled,
// so that the same refusal sent again (the receipt is the machine's, replayable until its token
// expires) is counted, not journaled again. One entry per device at most.
type journaledReceipts struct {
	m sync.Map // device id (int64) → "request code"
}

// first reports whether code is new for device id's request, and keeps it.
func (j *journaledReceipts) first(id int64, request, code string) bool {
	key := request + " " + code
	prev, seen := j.m.Swap(id, key)
	return !seen || prev != key
}

func newReceiptMetrics() *receiptMetrics {
	return &receiptMetrics{
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_wipe_receipts_total",
			Help: "Wipe receipts signed by the attested machine's TPM, by outcome: recorded (the device wiped or retired), receipt_request_ended (its request was not running: a replay or a late receipt), the refusal code of a signed receipt that does not confirm the erase (receipt_other_boot, receipt_wrong_disk, receipt_wipe_failed), another refusal's code, or error.",
		}, []string{"outcome"}),
		unconfirmed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_unconfirmed_devices",
			Help: "Devices whose fleet_state is unconfirmed, as the last listing found them: a wipe or retirement whose Workflow was reported successful with no verified receipt from the machine's TPM; the owner asks for it again.",
		}),
	}
}

func (m *receiptMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.receipts, m.unconfirmed}
}

// atZero creates the outcomes fleetd knows in advance at 0 (metrics.go, startAtZero).
func (m *receiptMetrics) atZero() error {
	return atZero(m.receipts.MetricVec, []string{ReceiptRecorded, CodeReceiptRequestEnded, string(attest.CheckReceiptBoot),
		string(attest.CheckReceiptDisk), string(attest.CheckReceiptWipeFailed), "error"})
}

// observe counts a listing's unconfirmed devices.
func (m *receiptMetrics) observe(devices []Device) {
	n := 0
	for _, d := range devices {
		if d.Owned.State == StateUnconfirmed {
			n++
		}
	}
	m.unconfirmed.Set(float64(n))
}

// RecordWipeReceipt records a verified receipt (handlers.WipeReceipts): under the device's lock,
// on the device as NetBox has it and fleetd vouches for it (judgedOnOwnFields), the receipt's
// request must be the device's running wipe or retirement; then EventReceiptVerified ends it
// wiped (retired) in one conditional write, journaled. A receipt of any other request, or of
// this one once it ended (recorded already: a replay), is refused receipt_request_ended with
// nothing written, and so is one whose request moved on while it was recorded (another fleetd
// instance recorded the same receipt first). NetBox failing is an error wrapping ErrNetBoxUnavailable:
// the agent retries.
func (s *Requests) RecordWipeReceipt(ctx context.Context, r attest.VerifiedReceipt) (Outcome, error) {
	action := Action(r.Action)
	out := Outcome{DeviceID: r.DeviceID, Device: r.Device, Action: action, Step: "receipt", Result: "refused"}
	unlock := s.core.locks.lock(r.DeviceID)
	defer unlock()
	d, err := s.core.netbox.Device(ctx, r.DeviceID)
	switch {
	case errors.Is(err, ErrNotFound):
		out.Check = CodeReceiptRequestEnded
		s.core.metrics.receipts.receipts.WithLabelValues(CodeReceiptRequestEnded).Inc()
		return out, Refuse(RefusedConflict, CodeReceiptRequestEnded, "%s request %s ended: NetBox no longer has device %d (%s); nothing is recorded",
			action, r.Request, r.DeviceID, r.Device)
	case err != nil:
		out.Result = "error"
		s.core.metrics.receipts.receipts.WithLabelValues("error").Inc()
		return out, fmt.Errorf("record the wipe receipt of %s: read device %d: %w: %w", r.Device, r.DeviceID, ErrNetBoxUnavailable, err)
	}
	if d, err = s.core.judgedOnOwnFields(ctx, d); err != nil {
		out.Check = codeOf(err)
		s.core.metrics.receipts.receipts.WithLabelValues(out.Check).Inc()
		return out, err
	}
	out = outcomeFor(d, action, "receipt", "refused")
	if err := receiptRequestRunning(d, r.Receipt); err != nil {
		out.Check = CodeReceiptRequestEnded
		s.core.metrics.receipts.receipts.WithLabelValues(CodeReceiptRequestEnded).Inc()
		return out, err
	}
	o, wrote, err := s.core.applyRecorded(ctx, d, action, EventReceiptVerified, receiptRecordedMessage(d, r.Receipt), Patch{})
	o.Step = "receipt"
	switch {
	case err != nil:
		o.Result = "error"
		s.core.metrics.receipts.receipts.WithLabelValues("error").Inc()
		return o, err
	case !wrote:
		// Read again after a conflict, the request had moved on: another instance recorded this
		// receipt first, or the owner's or the Workflow's end came between.
		o.Result, o.Check = "refused", CodeReceiptRequestEnded
		s.core.metrics.receipts.receipts.WithLabelValues(CodeReceiptRequestEnded).Inc()
		return o, Refuse(RefusedConflict, CodeReceiptRequestEnded,
			"%s's %s request %s moved on while its receipt was recorded (another fleetd instance recorded it first, or the request ended): nothing is recorded here",
			d.Name, action, r.Request)
	}
	o.Result = ReceiptRecorded
	s.core.metrics.receipts.receipts.WithLabelValues(ReceiptRecorded).Inc()
	// The erased machine's Node goes with it (leaving.go); a deletion that fails is retried by
	// the reconcile passes, and never fails the receipt the agent holds.
	removed, _ := s.nodes.remove(ctx, d)
	o.Detail = withSentence(o.Detail, removed)
	return o, nil
}

// receiptRequestRunning refuses a receipt whose request is not d's running wipe or retirement.
func receiptRequestRunning(d Device, r attest.Receipt) error {
	switch {
	case d.Owned.Request == r.Request && d.Owned.State == StateWiping:
		return nil
	case d.Owned.Request == r.Request:
		return Refuse(RefusedConflict, CodeReceiptRequestEnded,
			"%s's %s request %s has ended (fleet_state %s): a receipt is recorded once, while its request is wiping; nothing is recorded",
			d.Name, r.Action, r.Request, stateWord(d.Owned.State))
	}
	return Refuse(RefusedConflict, CodeReceiptRequestEnded,
		"the receipt is of %s's %s request %s, and the device is on request %q (fleet_state %s): nothing is recorded",
		d.Name, r.Action, r.Request, d.Owned.Request, stateWord(d.Owned.State))
}

// receiptRecordedMessage is fleet_message and the journal entry of a recorded receipt. The
// report's method and byte count are quoted: the machine's TPM signed them, and attest took a
// method only as a word of at most 64 of [A-Za-z0-9._+-] (docs/security.md, "Claimed input").
func receiptRecordedMessage(d Device, r attest.Receipt) string {
	what := "the device is wiped; its certificates are no longer accepted"
	if Action(r.Action) == ActionRetire {
		what = "the device is retired; its certificates are no longer accepted"
	}
	return fmt.Sprintf("%s request %s: the machine's TPM confirmed the erase of disk %s (method %s, %d bytes) in the attested HookOS boot, with the key its attestation activated (AK %.16s…); %s.",
		r.Action, r.Request, d.Declared.DiskSerial, r.Report.Method, r.Report.Bytes, r.AKSHA256, what)
}

// unconfirmedMessage is fleet_message and the journal entry of a wipe or retirement whose
// Workflow was reported successful with no verified receipt recorded.
func unconfirmedMessage(d Device, action Action, workflow string) string {
	again := "To wipe it, set desired_action=wipe again."
	if action == ActionRetire {
		again = "To retire it, set desired_action=wipe on the decommissioning device."
	}
	return fmt.Sprintf("%s request %s unconfirmed: Workflow %s was reported successful with no receipt from the machine's TPM, so the erase of disk %s is not confirmed and the disk may hold its data; its certificates are no longer accepted (docs/runbooks.md, \"Wipe unconfirmed\"). %s",
		action, d.Owned.Request, workflow, d.Declared.DiskSerial, again)
}

// RefusedWipeReceipt journals a receipt the attested machine's TPM signed and attest refused
// (handlers.WipeReceipts): made after a reset or resume of the TPM, or reporting another disk or
// a failed erase. It changes no state and writes no field: the device stays wiping, the agent
// exits non-zero and the Workflow's failure ends the request, whose message then names the
// refusal. The entry (a warning) says the code and its fixed sentence, never what the report
// said, and is written while the receipt's request is running, once per request and code in
// this process; every one is counted.
func (s *Requests) RefusedWipeReceipt(ctx context.Context, r attest.RefusedReceipt) error {
	code := string(r.Refusal.Check)
	rc := r.Receipt
	s.core.metrics.receipts.receipts.WithLabelValues(code).Inc()
	unlock := s.core.locks.lock(rc.DeviceID)
	defer unlock()
	d, err := s.core.netbox.Device(ctx, rc.DeviceID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil // nothing to journal on
	case err != nil:
		return fmt.Errorf("journal the refused wipe receipt of %s: read device %d: %w: %w", rc.Device, rc.DeviceID, ErrNetBoxUnavailable, err)
	}
	if d, err = s.core.judgedOnOwnFields(ctx, d); err != nil {
		if _, refused := AsRefusal(err); refused {
			return nil // no running request fleetd vouches for: the refusal is answered, not journaled
		}
		return err
	}
	if d.Owned.Request != rc.Request || d.Owned.State != StateWiping {
		return nil
	}
	s.refusals.note(d.ID, rc.Request, code)
	if !s.receiptRefusals.first(d.ID, rc.Request, code) {
		return nil
	}
	s.core.journal(ctx, d, JournalWarning, fmt.Sprintf("%s The erase is not confirmed; nothing is recorded, and the request ends when its Workflow does.",
		receiptRefusalSentence(d.Name, code)))
	return nil
}

// receiptRefusalSentence is what the journal, and the failed request's message, say of a refused
// receipt: the code and its fixed sentence.
func receiptRefusalSentence(device, code string) string {
	return fmt.Sprintf("The wipe receipt of %s was refused (%s): %s", device, code, PublicSentence(code))
}

package main

import (
	"context"
	"fmt"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
)

// receiptsUnrecorded is the receipt route's domain part (handlers.WipeReceipts) until fleet
// records receipts: it takes a receipt the route verified and records nothing, so the device's
// state still follows its Workflow's action states, as before receipts; the route's decision line
// says what the receipt proved (outcome "verified", its request and report in detail). A receipt
// the machine's TPM signed that attest refused is answered with its refusal and journaled nowhere
// yet. fleet's implementation replaces it (docs/http.md, "Wipe receipts").
type receiptsUnrecorded struct{}

func (receiptsUnrecorded) RecordWipeReceipt(_ context.Context, r attest.VerifiedReceipt) (fleet.Outcome, error) {
	return fleet.Outcome{Device: r.Device, DeviceID: r.DeviceID, Action: fleet.Action(r.Action), Step: "receipt", Result: "verified",
		Detail: fmt.Sprintf("request %s: disk %s %s by %s (%d bytes), quoted by AK %.16s…; not recorded: this fleetd records the request from its Workflow",
			r.Request, r.Report.DiskSerial, r.Report.Result, r.Report.Method, r.Report.Bytes, r.AKSHA256)}, nil
}

func (receiptsUnrecorded) RefusedWipeReceipt(context.Context, attest.RefusedReceipt) error {
	return nil
}

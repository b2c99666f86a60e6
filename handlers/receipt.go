package handlers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	goattest "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
)

// WipeReceipts is what the receipt route needs of the domain once attest has judged a receipt
// (docs/http.md, "Wipe receipts"): the handler authenticates the token and verifies the receipt,
// the domain decides what the device's request becomes and writes it to NetBox.
type WipeReceipts interface {
	// RecordWipeReceipt records a receipt that confirms the erase: the device becomes wiped (or
	// retired) when the receipt's request is the device's running wipe (or retirement). Its
	// Outcome is the request's decision line (Result "recorded" when it wrote). Its error is a
	// *fleet.Refusal when the device is not where the receipt can be recorded (the request has
	// ended or is another: a replayed receipt), an error wrapping fleet.ErrNetBoxUnavailable when NetBox
	// failed (503, the agent retries), any other error fleetd's own (500).
	RecordWipeReceipt(ctx context.Context, r attest.VerifiedReceipt) (fleet.Outcome, error)
	// RefusedWipeReceipt is told of a receipt the attested machine's TPM signed that attest
	// refused (made after a TPM reset, reporting another disk or a failed erase), so that the
	// device's journal can say so; the handler then answers the refusal. An error is NetBox's or
	// fleetd's failure (503 or 500: the agent retries, and the retry is refused again). The
	// receipts refused before their signature verified reach neither method: whoever sent them
	// proved nothing, so they cost a log line only.
	RefusedWipeReceipt(ctx context.Context, r attest.RefusedReceipt) error
}

// wipeReceipt serves POST /v1/wipe/receipt (api.ReceiptRequest → api.ReceiptResponse). As for the
// evidence, the token is authenticated first, from the body's first members, before the rest of
// the body is read or the domain is asked anything; then attest verifies the receipt, and only a
// verified receipt reaches RecordWipeReceipt.
func (s *Server) wipeReceipt(w http.ResponseWriter, r *http.Request) {
	out := fleet.Outcome{Step: "receipt", Result: "refused"}
	if s.deps.ReceiptTokens == nil || s.deps.Receipts == nil {
		unread(w)
		writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: "not_configured",
			Message: "this fleetd does not take wipe receipts: its wiring has no receipt sealer or recorder"})
		return
	}
	// 1. The token, before anything that costs.
	head, err := readTokenHead(r.Body, errNoReceiptHead)
	if err != nil {
		unread(w)
		s.nodeError(w, out, err)
		return
	}
	out.Device = head.claimedDevice
	tok, err := s.deps.ReceiptTokens.Authenticate(head.claimedToken)
	if tok != nil {
		c := tok.Claims()
		out.DeviceID, out.Action = c.DeviceID, fleet.Action(c.Action)
		if err == nil && c.Device != head.claimedDevice {
			err = &attest.Refusal{Check: attest.CheckReceiptMismatch, Msg: "the receipt token was issued to device " + c.Device + ", not to the device the receipt names"}
		}
	}
	if err != nil {
		unread(w)
		s.nodeError(w, out, err)
		return
	}
	// 2. The receipt, decoded strictly and verified.
	var req api.ReceiptRequest
	if err := decodeJSONFrom(io.MultiReader(bytes.NewReader(head.raw), r.Body), &req); err != nil {
		s.nodeError(w, out, err)
		return
	}
	v, err := attest.VerifyReceipt(tok, attest.ClaimedReceipt{Device: req.Device, Request: req.Request,
		Report: attest.WipeReport{DiskSerial: req.DiskSerial, Method: req.Method, Result: req.Result, Bytes: req.Bytes},
		Quote:  goattest.Quote{Quote: req.Quote.Quote, Signature: req.Quote.Signature}})
	var signed *attest.RefusedReceipt
	switch {
	case errors.As(err, &signed):
		if derr := s.deps.Receipts.RefusedWipeReceipt(r.Context(), *signed); derr != nil {
			out.Result = "error"
			s.nodeError(w, out, derr)
			return
		}
		s.nodeError(w, out, err)
		return
	case err != nil:
		s.nodeError(w, out, err)
		return
	}
	// 3. The domain records what the verified receipt proves.
	o, err := s.deps.Receipts.RecordWipeReceipt(r.Context(), *v)
	if err != nil {
		s.nodeError(w, o, err)
		return
	}
	s.decision(w, o, nil)
	writeJSON(w, http.StatusOK, api.ReceiptResponse{Result: o.Result})
}

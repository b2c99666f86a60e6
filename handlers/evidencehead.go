package handlers

import (
	"bytes"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// maxEvidenceHead is how much of an evidence body is read before its token is authenticated:
// the device name (NetBox's names are at most 64 characters) and the sealed token (under 1 KiB),
// with room to spare.
const maxEvidenceHead = 8 << 10

// evidenceHead is the start of an evidence body: its claimed device and token, and the bytes
// read to find them (the body is read on from there).
type evidenceHead struct {
	claimedDevice, claimedToken string
	raw                         []byte
}

// errNoHead refuses an evidence body that does not begin with its device and token;
// errNoReceiptHead a receipt's.
var (
	errNoHead = fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed,
		"the evidence body must begin with its device and token members, within its first 8 KiB: run an agent as new as fleetd")
	errNoReceiptHead = fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed,
		"the receipt body must begin with its device and token members, within its first 8 KiB: run an agent as new as fleetd")
)

// readEvidenceHead reads at most maxEvidenceHead bytes of an evidence body and finds its first
// two members, which must be "device" and "token" (in either order; fleetd's agent sends them
// first, as api.EvidenceRequest declares them), both strings. The token is authenticated before
// anything more is read (docs/security.md, "Transport and abuse"), so a caller without one costs
// fleetd these few kilobytes whatever it sends after them; the whole body, these bytes included,
// is then decoded strictly as before (decodeJSON).
func readEvidenceHead(body io.Reader) (evidenceHead, error) { return readTokenHead(body, errNoHead) }

// readTokenHead is readEvidenceHead of any body that begins with its device and token (a wipe
// receipt's, api.ReceiptRequest); noHead refuses one that does not.
func readTokenHead(body io.Reader, noHead error) (evidenceHead, error) {
	buf := make([]byte, maxEvidenceHead)
	n, err := io.ReadFull(body, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return evidenceHead{}, fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body could not be read: %v", err)
	}
	h := evidenceHead{raw: buf[:n]}
	dec := jsontext.NewDecoder(bytes.NewReader(h.raw))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return evidenceHead{}, noHead
	}
	for seen := 0; seen < 2; seen++ {
		tok, err := dec.ReadToken()
		if err != nil || tok.Kind() != '"' {
			return evidenceHead{}, noHead
		}
		name := tok.String() // the next read voids tok
		if tok, err = dec.ReadToken(); err != nil || tok.Kind() != '"' {
			return evidenceHead{}, noHead
		}
		switch name {
		case "device":
			h.claimedDevice = tok.String()
		case "token":
			h.claimedToken = tok.String()
		default:
			return evidenceHead{}, noHead
		}
	}
	if h.claimedToken == "" {
		return evidenceHead{}, noHead // "device" twice: the strict decode would refuse it too
	}
	return h, nil
}

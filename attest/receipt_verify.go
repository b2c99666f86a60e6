package attest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
)

// WipeResultErased is the one result of a wipe report that confirms the erase.
const WipeResultErased = "erased"

// WipeReport is what the wipe program reported of its erase (the Workflow's wipe-result file):
// the serial of the disk it erased, how (its method: "blkdiscard", "nvme-format", …), whether
// it succeeded (WipeResultErased, or another word for what went wrong) and how many bytes the
// method covered. Claimed by the program; the receipt proves only that the attested machine's
// TPM quoted it (docs/security.md, "What a wipe receipt proves").
type WipeReport struct {
	DiskSerial string
	Method     string
	Result     string
	Bytes      uint64
}

// The report's fields: the disk serial as the enrollment takes a claimed one (at most 128 bytes,
// printable), the method and result as words.
const maxReportSerial = 128

var reportWord = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

func (r WipeReport) check() error {
	switch {
	case r.DiskSerial == "" || len(r.DiskSerial) > maxReportSerial || !printableUTF8(r.DiskSerial):
		return refuse(CheckReceiptMalformed, "the report's disk serial %.140q is empty, over %d bytes or not printable", r.DiskSerial, maxReportSerial)
	case !reportWord.MatchString(r.Method):
		return refuse(CheckReceiptMalformed, "the report's method %.70q is not a word of 1 to 64 letters, digits, '.', '_', '+' or '-'", r.Method)
	case !reportWord.MatchString(r.Result):
		return refuse(CheckReceiptMalformed, "the report's result %.70q is not a word of 1 to 64 letters, digits, '.', '_', '+' or '-'", r.Result)
	}
	return nil
}

func printableUTF8(s string) bool {
	return utf8.ValidString(s) && !slices.ContainsFunc([]rune(s), func(r rune) bool { return !unicode.IsPrint(r) })
}

// receiptExtraDataLabel starts every receipt's extraData preimage: its purpose and version.
const receiptExtraDataLabel = "fleetd-wipe-receipt-v1"

// ReceiptExtraData is the extraData (qualifying data) a receipt's quote carries: SHA-256 of the
// label "fleetd-wipe-receipt-v1" (22 ASCII bytes), then the nonce, the disk serial, the method
// and the result, each as a 2-byte big-endian length and its bytes, then the byte count as 8
// bytes big-endian (docs/http.md, "Wipe receipts"). Every field is length-prefixed, so no two
// reports share a preimage. The agent computes it to quote; VerifyReceipt to check the quote.
func ReceiptExtraData(nonce []byte, r WipeReport) ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if len(nonce) == 0 || len(nonce) > 0xffff {
		return nil, fmt.Errorf("receipt extraData: a nonce of %d bytes", len(nonce))
	}
	b := []byte(receiptExtraDataLabel)
	for _, f := range [][]byte{nonce, []byte(r.DiskSerial), []byte(r.Method), []byte(r.Result)} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f))) //nolint:gosec // G115: the nonce is checked above and r.check bounds the rest, each under 0xffff bytes
		b = append(b, f...)
	}
	b = binary.BigEndian.AppendUint64(b, r.Bytes)
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// ClaimedReceipt is what the agent sends with a receipt token: the device and request it names,
// the wipe program's report, and the quote of the SHA-256 PCRs over ReceiptExtraData. Untrusted.
type ClaimedReceipt struct {
	Device, Request string
	Report          WipeReport
	Quote           attest.Quote
}

// Receipt is what a receipt the token's AK signed says: whose request it is, what the wipe
// program reported, and which AK signed it.
type Receipt struct {
	DeviceID        int64
	Device, Request string
	Action          string // "wipe" or "retire"
	Report          WipeReport
	AKSHA256        string    // lowercase hex SHA-256 of the AK's TPMT_PUBLIC
	AttestedAt      time.Time // when the attestation issued the receipt token
}

// VerifiedReceipt is a receipt that confirms the erase: the AK the attestation activated in the
// approved EK's TPM signed, in the attested boot, over this request's nonce, a report that the
// declared disk was erased. Only VerifyReceipt makes one, and only a VerifiedReceipt may record a
// device wiped or retired.
type VerifiedReceipt struct {
	Receipt
}

// RefusedReceipt is the refusal of a receipt whose quote the token's AK did sign over the
// token's nonce and the report sent, and which fleetd refuses all the same: made after a reset or
// resume of the TPM, or reporting another disk or a failed erase. The machine's own TPM signed
// it, so it is worth a journal entry where a forgery is not (docs/http.md, "Wipe receipts").
type RefusedReceipt struct {
	Receipt Receipt
	Refusal *Refusal
}

func (r *RefusedReceipt) Error() string { return r.Refusal.Error() }
func (r *RefusedReceipt) Unwrap() error { return r.Refusal }

// VerifyReceipt checks a receipt against its authenticated token, in this order: the token is
// for the device and request the receipt names; the report and the quote are in shape; the quote
// verifies under the token's AK (go-attestation's AKPublic.Verify: its signature, that it is a
// quote, its extraData against ReceiptExtraData of the token's nonce and the report, and its PCR
// digest against the token's SHA-256 PCR values, exactly PCR 0 to 23); the TPM's reset and
// restart counts are the attestation's; the report's disk serial is the declared one; the report
// says the disk was erased. A quote that does not verify is refused for the first difference its
// content shows, the extraData (receipt_wrong_nonce), then the PCRs (receipt_other_boot), or else
// for its signature (receipt_bad_signature). The checks after the quote verified return a
// *RefusedReceipt.
//
// A receipt can be presented twice: VerifyReceipt verifies it again. Refusing a replay is the
// caller's, which knows whether the request is still running.
func VerifyReceipt(tok *SealedReceipt, claimed ClaimedReceipt) (*VerifiedReceipt, error) {
	c := tok.c
	// 1. The token is this receipt's.
	if claimed.Device != c.Device || claimed.Request != c.Request {
		return nil, refuse(CheckReceiptMismatch, "the receipt token was issued for %s request %s, not for %.64q request %.64q",
			c.Device, c.Request, claimed.Device, claimed.Request)
	}
	// 2. The report and the quote are in shape.
	extra, err := ReceiptExtraData(c.Nonce, claimed.Report)
	if err != nil {
		return nil, err
	}
	att, err := tpm2.DecodeAttestationData(claimed.Quote.Quote)
	if err != nil {
		return nil, refuseErr(CheckReceiptMalformed, err, "the quote is not a TPMS_ATTEST made by a TPM")
	}
	if att.Type != tpm2.TagAttestQuote || att.AttestedQuoteInfo == nil {
		return nil, refuse(CheckReceiptMalformed, "the attestation is not a quote (tag 0x%x)", att.Type)
	}
	if _, err := tpm2.DecodeSignature(bytes.NewBuffer(claimed.Quote.Signature)); err != nil {
		return nil, refuseErr(CheckReceiptMalformed, err, "the quote's signature is not a TPMT_SIGNATURE")
	}
	// 3. The quote, by go-attestation, under the token's AK.
	ak, err := attest.ParseAKPublic(c.AKPublic)
	if err != nil {
		return nil, fmt.Errorf("parse the receipt token's AK: %w", err) // fleetd sealed it: our bug
	}
	pcrs := make([]attest.PCR, len(c.PCRs))
	for i, d := range c.PCRs {
		pcrs[i] = attest.PCR{Index: i, DigestAlg: crypto.SHA256, Digest: d}
	}
	if err := ak.Verify(claimed.Quote, pcrs, extra); err != nil {
		return nil, quoteRefusal(att, extra, ak.Hash, pcrs, err)
	}
	// 4. What the verified quote and report say.
	sum := sha256.Sum256(c.AKPublic)
	r := Receipt{DeviceID: c.DeviceID, Device: c.Device, Request: c.Request, Action: c.Action, Report: claimed.Report,
		AKSHA256: hex.EncodeToString(sum[:]), AttestedAt: c.IssuedAt}
	ci := att.ClockInfo
	switch {
	case ci.ResetCount != c.ResetCount || ci.RestartCount != c.RestartCount:
		return nil, &RefusedReceipt{Receipt: r, Refusal: refuse(CheckReceiptBoot,
			"the quote was made after a reset or resume of the TPM (reset count %d, restart count %d as the AK sees them; the attestation's %d, %d): not in the attested boot",
			ci.ResetCount, ci.RestartCount, c.ResetCount, c.RestartCount)}
	case claimed.Report.DiskSerial != c.DiskSerial:
		return nil, &RefusedReceipt{Receipt: r, Refusal: refuse(CheckReceiptDisk,
			"the wipe program reported disk serial %.140q, and the declared disk is %s", claimed.Report.DiskSerial, c.DiskSerial)}
	case claimed.Report.Result != WipeResultErased:
		return nil, &RefusedReceipt{Receipt: r, Refusal: refuse(CheckReceiptWipeFailed,
			"the wipe program reported %q (method %s, %d bytes) for disk %s, not %q", claimed.Report.Result, claimed.Report.Method,
			claimed.Report.Bytes, c.DiskSerial, WipeResultErased)}
	}
	return &VerifiedReceipt{Receipt: r}, nil
}

// quoteRefusal names why a quote go-attestation did not verify is refused: by the first
// difference its (unauthenticated) content shows from what the token expects, its extraData and
// then its PCRs, or else by its signature. The code says where the quote differs; the refusal is
// the same whichever it names.
func quoteRefusal(att *tpm2.AttestationData, extra []byte, h crypto.Hash, pcrs []attest.PCR, verr error) error {
	q := att.AttestedQuoteInfo
	if !bytes.Equal(att.ExtraData, extra) {
		return refuseErr(CheckReceiptNonce, verr, "the quote's extraData %x is not the receipt's %x (the token's nonce and the report sent)", []byte(att.ExtraData), extra)
	}
	want := make([]int, len(pcrs))
	d := h.New()
	for i, p := range pcrs {
		want[i] = p.Index
		d.Write(p.Digest)
	}
	if q.PCRSelection.Hash != tpm2.AlgSHA256 || !slices.Equal(q.PCRSelection.PCRs, want) {
		return refuseErr(CheckReceiptBoot, verr, "the quote covers PCRs %v of bank 0x%x, not the attestation's SHA-256 PCRs 0 to %d", q.PCRSelection.PCRs, uint16(q.PCRSelection.Hash), len(pcrs)-1)
	}
	if !bytes.Equal(q.PCRDigest, d.Sum(nil)) {
		return refuseErr(CheckReceiptBoot, verr, "the quoted PCRs are not the attestation's: the PCRs changed since (another boot, or a measurement after it)")
	}
	return refuseErr(CheckReceiptSignature, verr, "the quote's signature does not verify under the AK the attestation activated")
}

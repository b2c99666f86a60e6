package attest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm-tools/simulator"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/swtpm"
)

const (
	receiptSerial   = "S3Z9NB0K123456"
	receiptRequest  = "wipe-k3f9x2mq"
	receiptLifetime = time.Hour // the wipe's Workflow timeout
	receiptMargin   = 10 * time.Minute
)

// wiped is a machine whose wipe attestation fleetd accepted: attest's own checks ran on its
// real TPM (EK approval by hash, credential activation, the quote and event log), and the
// receipt token was issued from their verified values, as fleet's evidence round trip issues it.
type wiped struct {
	m       *machine
	clock   *clock
	sealer  *attest.ReceiptSealer
	ticket  attest.ReceiptTicket
	akBlob  []byte // the activated AK, as the agent keeps it in the Workflow's directory
	request string
}

// attestWipe runs a wipe attestation of m for request and issues its receipt token with sealer.
func attestWipe(t testing.TB, m *machine, c *clock, sealer *attest.ReceiptSealer, request string) *wiped {
	t.Helper()
	log := eventLogOf(t, m)
	ekPub, _, err := m.EK()
	if err != nil {
		t.Fatal(err)
	}
	ekv, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: attest.EKPolicyHash, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ekv.Verify(ekPub, nil, attest.EKApproval{SHA256: []string{sha256Hex(ekPub)}})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := m.NewAK()
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close(m.Attest()) // the receipt loads it again from its blob, as the agent does
	ch, err := attest.NewAKChallenge(ek, ak.AttestationParameters(), seeded(3))
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := attest.NewNonce(seeded(4))
	if err != nil {
		t.Fatal(err)
	}
	tokens := newSealer(t, c, 1)
	sealed, err := tokens.Seal(attest.TokenClaims{DeviceID: 7, Device: "node-a", Request: request, EKSHA256: ek.SHA256,
		AKDigest: ch.AKDigest, Secret: ch.Secret, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	akPublic := ak.AttestationParameters().Public
	tok, err := tokens.Open(sealed, attest.Binding{DeviceID: 7, Device: "node-a", ApprovedEKs: []string{ek.SHA256}, ClaimedAKPublic: akPublic})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := m.ActivateCredential(ak, ch.Credential)
	if err != nil {
		t.Fatal(err)
	}
	vak, err := attest.VerifyActivation(tok, secret, akPublic)
	if err != nil {
		t.Fatal(err)
	}
	pp, err := m.AttestPlatform(ak, nonce, log)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := attest.VerifyPlatform(vak, nonce, *pp)
	if err != nil {
		t.Fatal(err)
	}
	disk, err := attest.MatchDisk(receiptSerial, disks)
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := sealer.Issue(attest.ReceiptGrant{DeviceID: 7, Device: "node-a", Request: request, Action: "wipe",
		AK: vak, Boot: boot, Disk: disk, Lifetime: receiptLifetime})
	if err != nil {
		t.Fatal(err)
	}
	blob, err := ak.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &wiped{m: m, clock: c, sealer: sealer, ticket: ticket, akBlob: blob, request: request}
}

func newReceiptSealer(t testing.TB, c *clock, key byte) *attest.ReceiptSealer {
	t.Helper()
	s, err := attest.NewReceiptSealer(attest.ReceiptConfig{TokenKey: bytes.Repeat([]byte{key}, 32), Margin: receiptMargin,
		Rand: seeded(key + 10), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quote is the agent's receipt step on m: the AK loaded from blob quotes the SHA-256 PCRs over
// the receipt's extraData for nonce and report.
func quote(t testing.TB, m *machine, blob, nonce []byte, report attest.WipeReport) ga.Quote {
	t.Helper()
	ak, err := m.Attest().LoadAK(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close(m.Attest())
	extra, err := attest.ReceiptExtraData(nonce, report)
	if err != nil {
		t.Fatal(err)
	}
	q, err := m.QuoteReceipt(ak, extra)
	if err != nil {
		t.Fatal(err)
	}
	return *q
}

func erased() attest.WipeReport {
	return attest.WipeReport{DiskSerial: receiptSerial, Method: "blkdiscard", Result: attest.WipeResultErased, Bytes: 1 << 40}
}

// receiptRow is one receipt presented to fleetd: the token, what the receipt names, and the quote.
type receiptRow struct {
	name   string
	token  string
	claim  attest.ClaimedReceipt
	at     time.Time // the clock when it is presented; zero: the attestation's time
	want   attest.Check
	signed bool // a refusal of a receipt the token's AK signed (*attest.RefusedReceipt)
}

// TestReceipt proves what a wipe receipt accepts and refuses with real TPMs: the simulator wipes
// (its attestation through attest's checks, its receipt quoted by the agent's TPM code), swtpm is
// the other machine. Each refusal row changes one thing of a valid receipt.
func TestReceipt(t *testing.T) {
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	log := eventlogs.Ubuntu2104NoSecureBoot
	if err := swtpm.ReplayEventLog(sim, log); err != nil {
		_ = sim.Close()
		t.Fatal(err)
	}
	m := openMachine(t, channel{sim, log})
	c := &clock{testTime}
	sealer := newReceiptSealer(t, c, 1)
	w := attestWipe(t, m, c, sealer, receiptRequest)
	other := attestWipe(t, m, c, sealer, "wipe-othr2req") // the same machine's next wipe request
	claim := func(tok attest.ReceiptTicket, report attest.WipeReport, q ga.Quote) attest.ClaimedReceipt {
		return attest.ClaimedReceipt{Device: "node-a", Request: receiptRequest, Report: report, Quote: q}
	}
	valid := quote(t, m, w.akBlob, w.ticket.Nonce, erased())
	rows := []receiptRow{
		{name: "ok/erased", claim: claim(w.ticket, erased(), valid)},
		// attest alone cannot refuse a replay: the same receipt verifies again. fleet refuses it,
		// as the request it names has ended (docs/http.md, "Wipe receipts").
		{name: "ok/replayed-verifies-again", claim: claim(w.ticket, erased(), valid)},
		{name: "refuse/expired", claim: claim(w.ticket, erased(), valid), at: testTime.Add(receiptLifetime + receiptMargin), want: attest.CheckReceiptExpired},
		{name: "refuse/another-request's-token", token: other.ticket.Token, claim: claim(w.ticket, erased(), valid), want: attest.CheckReceiptMismatch},
		{name: "refuse/another-request's-nonce", claim: claim(w.ticket, erased(), quote(t, m, w.akBlob, other.ticket.Nonce, erased())), want: attest.CheckReceiptNonce},
		{name: "refuse/report-changed-after-quoting", claim: claim(w.ticket, func() attest.WipeReport { r := erased(); r.Bytes = 1; return r }(), valid), want: attest.CheckReceiptNonce},
		{name: "refuse/another-disk-serial", claim: claim(w.ticket, withSerial("WD-WCC4N7XYZ"), quote(t, m, w.akBlob, w.ticket.Nonce, withSerial("WD-WCC4N7XYZ"))),
			want: attest.CheckReceiptDisk, signed: true},
		{name: "refuse/wipe-reports-failure", claim: claim(w.ticket, withResult("failed"), quote(t, m, w.akBlob, w.ticket.Nonce, withResult("failed"))),
			want: attest.CheckReceiptWipeFailed, signed: true},
		{name: "refuse/another-AK-of-the-same-TPM", claim: claim(w.ticket, erased(), quote(t, m, other.akBlob, w.ticket.Nonce, erased())), want: attest.CheckReceiptSignature},
		{name: "refuse/truncated-quote", claim: claim(w.ticket, erased(), ga.Quote{Quote: valid.Quote[:len(valid.Quote)-9], Signature: valid.Signature}), want: attest.CheckReceiptMalformed},
		{name: "refuse/truncated-signature", claim: claim(w.ticket, erased(), ga.Quote{Quote: valid.Quote, Signature: valid.Signature[:40]}), want: attest.CheckReceiptMalformed},
		{name: "refuse/tampered-clock-in-quote", claim: claim(w.ticket, erased(), tamperAfter(t, valid, w.ticket.Nonce)), want: attest.CheckReceiptSignature},
		{name: "refuse/tampered-signature", claim: claim(w.ticket, erased(), ga.Quote{Quote: valid.Quote, Signature: flipLast(valid.Signature)}), want: attest.CheckReceiptSignature},
		{name: "refuse/malformed-report", claim: claim(w.ticket, func() attest.WipeReport { r := erased(); r.Method = "blk discard"; return r }(), valid), want: attest.CheckReceiptMalformed},
		{name: "refuse/unprintable-serial", claim: claim(w.ticket, withSerial("S3Z9\x00"), valid), want: attest.CheckReceiptMalformed},
	}
	// Another machine: swtpm, its PCRs holding the same boot, quotes the same extraData with its
	// own AK (which the agent there could load from a blob of its own).
	sw := swtpmMachine(t, log)
	swAK, err := sw.NewAK()
	if err != nil {
		t.Fatal(err)
	}
	swBlob, err := swAK.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_ = swAK.Close(sw.Attest())
	rows = append(rows, receiptRow{name: "refuse/another-machine's-AK", claim: claim(w.ticket, erased(), quote(t, sw, swBlob, w.ticket.Nonce, erased())),
		want: attest.CheckReceiptSignature})
	// Another boot, by its PCRs: something is measured after the attestation.
	if err := swtpm.ExtendPCR(sim, 23, ga.HashSHA256, sha256Of([]byte("measured after the attestation"))); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, receiptRow{name: "refuse/PCRs-changed-since-the-attestation", claim: claim(w.ticket, erased(), quote(t, m, w.akBlob, w.ticket.Nonce, erased())),
		want: attest.CheckReceiptBoot})
	// Another boot with the same PCRs: the machine reboots into the same boot chain (a TPM
	// Reset), the log replays to the same values, and the AK loads from its blob again.
	if err := sim.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := swtpm.ReplayEventLog(sim, log); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, receiptRow{name: "refuse/same-PCRs-after-a-reboot", claim: claim(w.ticket, erased(), quote(t, m, w.akBlob, w.ticket.Nonce, erased())),
		want: attest.CheckReceiptBoot, signed: true})

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			c.t = testTime
			if !r.at.IsZero() {
				c.t = r.at
			}
			token := w.ticket.Token
			if r.token != "" {
				token = r.token
			}
			got, err := presentReceipt(sealer, token, r.claim)
			if r.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.Device != "node-a" || got.Request != receiptRequest || got.Action != "wipe" || got.Report != erased() ||
					got.AttestedAt != testTime || len(got.AKSHA256) != 64 {
					t.Errorf("verified %+v, want node-a's %s wipe of %s as reported, attested at %s", got, receiptRequest, receiptSerial, testTime)
				}
				return
			}
			ar, ok := attest.AsRefusal(err)
			if !ok || ar.Check != r.want || got != nil {
				t.Fatalf("got %v, %v; want refusal %s", got, err, r.want)
			}
			var signed *attest.RefusedReceipt
			if errors.As(err, &signed) != r.signed {
				t.Errorf("refusal %v: a receipt the AK signed = %v, want %v", err, !r.signed, r.signed)
			}
			if r.signed && (signed.Receipt.Request != receiptRequest || signed.Receipt.Report != r.claim.Report) {
				t.Errorf("the signed refusal carries %+v, want the request and the report sent", signed.Receipt)
			}
		})
	}
}

// presentReceipt is the receipt route's order: the token is authenticated first, then the receipt
// is verified against it.
func presentReceipt(s *attest.ReceiptSealer, token string, claim attest.ClaimedReceipt) (*attest.VerifiedReceipt, error) {
	tok, err := s.Authenticate(token)
	if err != nil {
		return nil, err
	}
	return attest.VerifyReceipt(tok, claim)
}

func withSerial(s string) attest.WipeReport { r := erased(); r.DiskSerial = s; return r }
func withResult(s string) attest.WipeReport { r := erased(); r.Result = s; return r }

// tamperAfter changes the quote's clock, the first byte after its extraData: the content the
// token expects (extraData, PCRs) stays, so only the signature can tell.
func tamperAfter(t *testing.T, q ga.Quote, nonce []byte) ga.Quote {
	t.Helper()
	extra, err := attest.ReceiptExtraData(nonce, erased())
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(q.Quote, extra)
	if i < 0 {
		t.Fatal("the quote does not carry its extraData")
	}
	out := slices.Clone(q.Quote)
	out[i+len(extra)+3] ^= 0x01 // a byte of clockInfo.clock
	return ga.Quote{Quote: out, Signature: q.Signature}
}

// TestReceiptTokenPurpose: a receipt token is sealed under a key and associated data of its own,
// so an enrollment token never passes as one, nor a receipt token as an enrollment token; and
// one of another fleetd's key is refused.
func TestReceiptTokenPurpose(t *testing.T) {
	c := &clock{testTime}
	receipts, tokens := newReceiptSealer(t, c, 1), newSealer(t, c, 1)
	enrollment, err := tokens.Seal(attest.TokenClaims{DeviceID: 7, Device: "node-a", Request: receiptRequest, Nonce: []byte("n")})
	if err != nil {
		t.Fatal(err)
	}
	m := simMachine(t, eventlogs.Ubuntu2104NoSecureBoot)
	w := attestWipe(t, m, c, receipts, receiptRequest)
	for _, tc := range []struct {
		name string
		open func() error
		want attest.Check
	}{
		{"ok/a-receipt-token", func() error { _, err := receipts.Authenticate(w.ticket.Token); return err }, ""},
		{"refuse/an-enrollment-token-as-a-receipt-token", func() error { _, err := receipts.Authenticate(enrollment); return err }, attest.CheckReceiptToken},
		{"refuse/a-receipt-token-as-an-enrollment-token", func() error { _, err := tokens.Authenticate(w.ticket.Token); return err }, attest.CheckToken},
		{"refuse/another-fleetd's-receipt-token", func() error { _, err := newReceiptSealer(t, c, 2).Authenticate(w.ticket.Token); return err }, attest.CheckReceiptToken},
		{"refuse/altered", func() error { _, err := receipts.Authenticate(withByte(t, w.ticket.Token, 30, 0xff)); return err }, attest.CheckReceiptToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.open()
			if ar, ok := attest.AsRefusal(err); tc.want == "" && err != nil || tc.want != "" && (!ok || ar.Check != tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	sealed, err := receipts.Authenticate(w.ticket.Token)
	if err != nil {
		t.Fatal(err)
	}
	cl := sealed.Claims()
	if cl.DiskSerial != receiptSerial || cl.Action != "wipe" || len(cl.PCRs) != 24 || !cl.ExpiresAt.Equal(testTime.Add(receiptLifetime+receiptMargin)) ||
		!bytes.Equal(cl.Nonce, w.ticket.Nonce) || bytes.Contains(mustB64(t, w.ticket.Token), w.ticket.Nonce) {
		t.Errorf("the token holds %+v; want the declared disk, the action, 24 PCRs, the expiry, and its nonce sealed", cl)
	}
}

// TestReceiptExtraData pins the encoding docs/http.md documents, and that moving bytes from one
// field into the next changes the hash.
func TestReceiptExtraData(t *testing.T) {
	nonce := bytes.Repeat([]byte{0xab}, 32)
	r := attest.WipeReport{DiskSerial: "S1", Method: "blkdiscard", Result: "erased", Bytes: 512}
	pre := []byte("fleetd-wipe-receipt-v1")
	for _, f := range []string{string(nonce), "S1", "blkdiscard", "erased"} {
		pre = binary.BigEndian.AppendUint16(pre, uint16(len(f)))
		pre = append(pre, f...)
	}
	pre = binary.BigEndian.AppendUint64(pre, 512)
	want := sha256.Sum256(pre)
	got, err := attest.ReceiptExtraData(nonce, r)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Errorf("ReceiptExtraData = %x, %v; want %x", got, err, want)
	}
	shifted := r
	shifted.DiskSerial, shifted.Method = "S1b", "lkdiscard"
	if s, _ := attest.ReceiptExtraData(nonce, shifted); bytes.Equal(s, got) {
		t.Error("a byte moved from the method into the serial gives the same extraData")
	}
	if _, err := attest.ReceiptExtraData(nil, r); err == nil {
		t.Error("no nonce gave an extraData")
	}
}

package attest

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"
)

// A wipe receipt is the machine's TPM saying that the wipe ran (docs/security.md, "What a wipe
// receipt proves"). Stateless like the enrollment: when a wipe's or a retirement's attestation is
// accepted, fleetd's answer carries a receipt token, sealed as the enrollment token is but under
// a key of its own, which binds what the receipt must match: the device and its request, the
// action, the declared disk serial, the AK the attestation just activated (its public area), a
// fresh nonce, the SHA-256 PCR values the attestation's quote verified and the TPM's reset and
// restart counts as that quote showed them, and an expiry. After the erase, the agent loads that
// AK again and quotes the same PCRs over the receipt's extraData (ReceiptExtraData: the nonce and
// what the wipe program reported), and sends the quote with the token back (VerifyReceipt).
//
// The token is sealed with AES-256-GCM under a key derived from the attestation token key with
// HKDF-SHA256 (info "fleetd wipe receipt token v1") and bound to its purpose by its associated
// data: an enrollment token never opens as a receipt token, nor a receipt token as an enrollment
// or boot-check token.

// The refusals of a wipe receipt, in the order VerifyReceipt runs its checks (docs/http.md,
// "Wipe receipts").
const (
	CheckReceiptToken    Check = "receipt_token_invalid"  // not sealed by this fleetd, or altered
	CheckReceiptExpired  Check = "receipt_expired"        // the token's lifetime is over
	CheckReceiptMismatch Check = "receipt_token_mismatch" // the token is another device's or request's
	// CheckReceiptMalformed is a report or quote out of shape: a field empty, too long or not
	// printable; a quote that is not a TPM's TPMS_ATTEST of a quote, or a signature that does not
	// decode (a truncated quote).
	CheckReceiptMalformed Check = "receipt_malformed"
	// CheckReceiptNonce is a quote whose extraData is not ReceiptExtraData of the token's nonce and
	// the report sent: a quote made for another request's nonce, or a report changed after it was
	// quoted.
	CheckReceiptNonce Check = "receipt_wrong_nonce"
	// CheckReceiptBoot is a quote of other PCRs than the attestation's (the PCRs changed since:
	// another boot, or something measured after the attestation), or of the same PCRs after a
	// reset or resume of the TPM (a reboot into the same boot chain).
	CheckReceiptBoot Check = "receipt_other_boot"
	// CheckReceiptSignature is a quote whose signature does not verify under the token's AK:
	// another TPM's, another key's, or altered.
	CheckReceiptSignature Check = "receipt_bad_signature"
	// CheckReceiptDisk is a verified receipt whose report names another disk serial than the
	// declared one the token binds.
	CheckReceiptDisk Check = "receipt_wrong_disk"
	// CheckReceiptWipeFailed is a verified receipt whose report says the erase did not succeed.
	CheckReceiptWipeFailed Check = "receipt_wipe_failed"
)

const (
	receiptTokenVersion = 1
	receiptTokenAAD     = "fleetd wipe receipt token v1"
)

// ReceiptClaims is what a receipt token carries from the attestation to the receipt.
type ReceiptClaims struct {
	DeviceID   int64  `json:"did"`
	Device     string `json:"dev"`
	Request    string `json:"req"`
	Action     string `json:"act"`  // the request's action: "wipe" or "retire"
	DiskSerial string `json:"disk"` // the declared disk serial the attestation found
	// AKPublic is the TPMT_PUBLIC of the AK the attestation activated, which must sign the receipt.
	AKPublic []byte `json:"ak"`
	// PCRs are the SHA-256 PCR values the attestation's quote verified, PCR 0 to 23 in index
	// order; ResetCount and RestartCount the TPM's counts that quote showed (QuotedBoot).
	PCRs         [][]byte  `json:"pcrs"`
	ResetCount   uint32    `json:"rst"`
	RestartCount uint32    `json:"rsm"`
	Nonce        []byte    `json:"n"`
	IssuedAt     time.Time `json:"iat"`
	ExpiresAt    time.Time `json:"exp"`
}

// ReceiptConfig configures a ReceiptSealer.
type ReceiptConfig struct {
	TokenKey []byte // the attestation token key (TokenKeySize bytes); a subkey is derived from it
	// Margin is added to a grant's Lifetime: the time the agent may take to quote and send the
	// receipt after the wipe's own limit (its retries to reach fleetd).
	Margin time.Duration
	Rand   io.Reader
	Now    func() time.Time
}

// ReceiptSealer issues and opens receipt tokens.
type ReceiptSealer struct {
	box    sealBox
	margin time.Duration
	rand   io.Reader
	now    func() time.Time
}

// NewReceiptSealer derives the sealing key and returns a sealer.
func NewReceiptSealer(cfg ReceiptConfig) (*ReceiptSealer, error) {
	if len(cfg.TokenKey) != TokenKeySize {
		return nil, fmt.Errorf("new receipt sealer: the token key is %d bytes, want %d", len(cfg.TokenKey), TokenKeySize)
	}
	if cfg.Margin < 0 || cfg.Rand == nil || cfg.Now == nil {
		return nil, errors.New("new receipt sealer: a Margin of at least 0, Rand and Now are needed")
	}
	key, err := hkdf.Key(sha256.New, cfg.TokenKey, nil, receiptTokenAAD, TokenKeySize)
	if err != nil {
		return nil, fmt.Errorf("new receipt sealer: derive key: %w", err)
	}
	box, err := newSealBox(key, receiptTokenVersion, receiptTokenAAD, cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("new receipt sealer: %w", err)
	}
	return &ReceiptSealer{box: box, margin: cfg.Margin, rand: cfg.Rand, now: cfg.Now}, nil
}

// ReceiptGrant is what an accepted wipe or retirement attestation grants its receipt. Only
// verified values make one: the AK VerifyActivation proved to be in the approved EK's TPM, the
// boot VerifyPlatform verified under it, the disk MatchDisk found.
type ReceiptGrant struct {
	DeviceID        int64
	Device, Request string
	Action          string // "wipe" or "retire"
	AK              *VerifiedAK
	Boot            *VerifiedBoot
	Disk            *VerifiedDisk
	Lifetime        time.Duration // how long the wipe may take: its Workflow's timeout
}

// ReceiptTicket is an issued receipt token and the nonce the receipt's quote must carry (the
// token hides it: the agent gets it beside).
type ReceiptTicket struct {
	Token     string
	Nonce     []byte
	ExpiresAt time.Time
}

// Issue draws a nonce and seals the grant's receipt token, valid for the grant's Lifetime and the
// margin.
func (s *ReceiptSealer) Issue(g ReceiptGrant) (ReceiptTicket, error) {
	if g.AK == nil || len(g.AK.PublicArea) == 0 || g.Boot == nil || g.Boot.Quoted == nil || g.Disk == nil || g.Lifetime <= 0 {
		return ReceiptTicket{}, errors.New("issue receipt token: the grant needs a verified AK with its public area, a boot verified by a quote, the disk and a positive Lifetime")
	}
	nonce, err := NewNonce(s.rand)
	if err != nil {
		return ReceiptTicket{}, fmt.Errorf("issue receipt token: %w", err)
	}
	c := ReceiptClaims{DeviceID: g.DeviceID, Device: g.Device, Request: g.Request, Action: g.Action, DiskSerial: g.Disk.Serial,
		AKPublic: bytes.Clone(g.AK.PublicArea), ResetCount: g.Boot.Quoted.ResetCount, RestartCount: g.Boot.Quoted.RestartCount,
		Nonce: nonce, IssuedAt: s.now().UTC()}
	for _, p := range g.Boot.Quoted.PCRs {
		c.PCRs = append(c.PCRs, bytes.Clone(p.Digest))
	}
	c.ExpiresAt = c.IssuedAt.Add(g.Lifetime + s.margin)
	tok, err := s.box.seal(c)
	if err != nil {
		return ReceiptTicket{}, fmt.Errorf("issue receipt token: %w", err)
	}
	return ReceiptTicket{Token: tok, Nonce: nonce, ExpiresAt: c.ExpiresAt}, nil
}

// SealedReceipt is a receipt token fleetd sealed, unexpired, not yet matched with the receipt
// that brought it (VerifyReceipt).
type SealedReceipt struct {
	c ReceiptClaims
}

// Claims returns the token's content.
func (t *SealedReceipt) Claims() ReceiptClaims { return t.c }

// Authenticate authenticates and decrypts a receipt token and checks its expiry: it costs one
// AES-GCM open, so the receipt route runs it before it reads the rest of the body (docs/security.md,
// "Transport and abuse"). An expired token is returned with its refusal: its claims are
// fleetd's own, and say whose receipt it was.
func (s *ReceiptSealer) Authenticate(claimedToken string) (*SealedReceipt, error) {
	var c ReceiptClaims
	switch err := s.box.open(claimedToken, &c); {
	case errors.Is(err, errNotAToken):
		return nil, refuse(CheckReceiptToken, "the token is not a fleetd wipe receipt token")
	case errors.Is(err, errNotSealed):
		return nil, refuse(CheckReceiptToken, "the receipt token was not sealed by this fleetd or was altered (an enrollment token is not a receipt token)")
	case err != nil:
		return nil, fmt.Errorf("open receipt token: %w", err) // fleetd sealed it: our bug
	}
	if now := s.now(); !now.Before(c.ExpiresAt) {
		return &SealedReceipt{c: c}, refuse(CheckReceiptExpired, "the receipt token of %s request %s expired at %s (issued %s): the wipe is not confirmed; ask for it again",
			c.Device, c.Request, c.ExpiresAt.Format(time.RFC3339), c.IssuedAt.Format(time.RFC3339))
	}
	return &SealedReceipt{c: c}, nil
}

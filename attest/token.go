package attest

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The enrollment handlers are stateless (docs/design.md §4): what the second round trip needs from the
// first travels in a token the machine carries back, sealed with AES-256-GCM under a key only
// fleetd has. Sealing makes the token opaque (the activation secret stays hidden from the
// machine, which must prove it can decrypt the credential) and unforgeable; the claims bind it
// to the device, the approved EK and the AK, and it expires.
//
// A token can be presented more than once within its lifetime by the machine it was made for;
// each use still requires that machine's TPM to have produced the quote and certification over
// the token's nonce, so a replay only repeats an enrollment its own TPM already proved.

// tokenVersion is the first byte of every token; tokenAAD binds the ciphertext to its purpose.
const (
	tokenVersion = 1
	tokenAAD     = "fleetd attest token v1"
)

// TokenKeySize is the size of the token key: 32 bytes, AES-256.
const TokenKeySize = 32

// ParseTokenKey reads a token key file: 64 hex digits (surrounding whitespace ignored) or 32 raw bytes.
func ParseTokenKey(b []byte) ([]byte, error) {
	if s := strings.TrimSpace(string(b)); len(s) == 2*TokenKeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	if len(b) == TokenKeySize {
		return b, nil
	}
	return nil, fmt.Errorf("parse token key: want %d hex digits or %d raw bytes, got %d bytes", 2*TokenKeySize, TokenKeySize, len(b))
}

// TokenClaims is what a token carries from the challenge to the evidence round trip.
type TokenClaims struct {
	DeviceID    int64  `json:"did"`
	Device      string `json:"dev"`
	Request     string `json:"req"`
	EKSHA256    string `json:"ek"` // the approved EK (VerifiedEK.SHA256)
	HWSerialNum []byte `json:"hw"` // VerifiedEK.HWSerialNum, for the certificates' SAN
	// EKIssuer is the issuer DN of an EK certificate whose chain was verified, and
	// TPMManufacturer the manufacturer code its SAN names: proved facts the evidence records
	// (layout.ProvedFacts). Both empty when the EK was approved by its hash alone.
	EKIssuer        string `json:"eki,omitempty"`
	TPMManufacturer string `json:"tpmm,omitempty"`
	// TPMVersion is VerifiedEK.TPMVersion: what the evidence proves of the TPM's version, once its
	// activation and quote verified.
	TPMVersion string    `json:"tpmv,omitempty"`
	AKDigest   []byte    `json:"ak"`  // SHA-256 of the AK's TPMT_PUBLIC
	Secret     []byte    `json:"sec"` // the credential-activation secret
	Nonce      []byte    `json:"n"`   // the nonce the quote and the LDevID certification must carry
	IssuedAt   time.Time `json:"iat"`
	ExpiresAt  time.Time `json:"exp"`
}

// TokenConfig configures a TokenSealer.
type TokenConfig struct {
	Key      []byte // TokenKeySize bytes
	Lifetime time.Duration
	Rand     io.Reader
	Now      func() time.Time
}

// TokenSealer seals and opens tokens.
type TokenSealer struct {
	box      sealBox
	lifetime time.Duration
	now      func() time.Time
}

// NewTokenSealer checks the configuration and returns a sealer.
func NewTokenSealer(cfg TokenConfig) (*TokenSealer, error) {
	if len(cfg.Key) != TokenKeySize {
		return nil, fmt.Errorf("new token sealer: the key is %d bytes, want %d", len(cfg.Key), TokenKeySize)
	}
	if cfg.Lifetime <= 0 || cfg.Rand == nil || cfg.Now == nil {
		return nil, errors.New("new token sealer: a positive Lifetime, Rand and Now are needed")
	}
	box, err := newSealBox(cfg.Key, tokenVersion, tokenAAD, cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("new token sealer: %w", err)
	}
	return &TokenSealer{box: box, lifetime: cfg.Lifetime, now: cfg.Now}, nil
}

// Seal stamps the claims with the issue time and expiry and seals them.
func (s *TokenSealer) Seal(c TokenClaims) (string, error) {
	c.IssuedAt = s.now().UTC()
	c.ExpiresAt = c.IssuedAt.Add(s.lifetime)
	tok, err := s.box.seal(c)
	if err != nil {
		return "", fmt.Errorf("seal token: %w", err)
	}
	return tok, nil
}

// Binding is what fleetd knows when the second round trip arrives, which a token must match:
// the device the request names (looked up in NetBox), its currently approved EKs, and the AK
// public the machine presents.
type Binding struct {
	DeviceID        int64
	Device          string
	ApprovedEKs     []string
	ClaimedAKPublic []byte
}

// Token is an opened token: fleetd sealed it, it is unexpired and it matches its Binding.
type Token struct {
	c TokenClaims
}

// Claims returns the token's content.
func (t *Token) Claims() TokenClaims { return t.c }

// SealedToken is a token fleetd sealed that has not expired, not yet matched with the device as
// NetBox has it (Bind). Its claims are fleetd's own: opening one costs an AES-GCM open and
// nothing else, so the evidence round trip authenticates its caller with it before it reads
// NetBox or takes the device's lock (docs/security.md, "Transport and abuse").
type SealedToken struct {
	c TokenClaims
}

// Claims returns the token's content: fleetd wrote it, but the device may have changed since.
func (t *SealedToken) Claims() TokenClaims { return t.c }

// Open authenticates and decrypts a token the machine presents, checks its expiry against the
// clock and its binding; a token altered, expired, or made for another device, EK or AK is
// refused.
func (s *TokenSealer) Open(claimedToken string, b Binding) (*Token, error) {
	t, err := s.Authenticate(claimedToken)
	if err != nil {
		return nil, err
	}
	return t.Bind(b)
}

// Authenticate authenticates and decrypts a token the machine presents and checks its expiry: a
// token fleetd did not seal, or altered, or expired, is refused. Nothing about the device is
// checked yet (Bind). An expired token is returned with its refusal: its claims are still
// fleetd's own, and say whose enrollment it was.
func (s *TokenSealer) Authenticate(claimedToken string) (*SealedToken, error) {
	var c TokenClaims
	switch err := s.box.open(claimedToken, &c); {
	case errors.Is(err, errNotAToken):
		return nil, refuse(CheckToken, "the token is not a fleetd attestation token")
	case errors.Is(err, errNotSealed):
		return nil, refuse(CheckToken, "the token was not sealed by this fleetd or was altered")
	case err != nil:
		return nil, fmt.Errorf("open token: %w", err) // fleetd sealed it: our bug
	}
	if now := s.now(); !now.Before(c.ExpiresAt) {
		return &SealedToken{c: c}, refuse(CheckTokenExpired, "the token expired at %s (issued %s); start the enrollment again",
			c.ExpiresAt.Format(time.RFC3339), c.IssuedAt.Format(time.RFC3339))
	}
	return &SealedToken{c: c}, nil
}

// Bind checks that an authenticated token was made for the device, EK and AK of b.
func (t *SealedToken) Bind(b Binding) (*Token, error) {
	c := t.c
	if c.DeviceID != b.DeviceID || c.Device != b.Device {
		return nil, refuse(CheckTokenBinding, "the token was issued to device %q, not %q", c.Device, b.Device)
	}
	if !slices.ContainsFunc(b.ApprovedEKs, func(h string) bool { return strings.EqualFold(strings.TrimSpace(h), c.EKSHA256) }) {
		return nil, refuse(CheckTokenBinding, "the token's EK %s is no longer among the device's approved ek_sha256", c.EKSHA256)
	}
	ak := sha256.Sum256(b.ClaimedAKPublic)
	if subtle.ConstantTimeCompare(ak[:], c.AKDigest) != 1 {
		return nil, refuse(CheckTokenBinding, "the AK presented (SHA-256 %x) is not the AK the challenge was made for (%x)", ak, c.AKDigest)
	}
	return &Token{c: c}, nil
}

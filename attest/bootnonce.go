package attest

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"
)

// A boot check's freshness without server-side state (docs/design.md §2, §5): fleetd hands the node a
// random nonce together with a sealed token that carries the nonce and the time it was issued.
// The node quotes over the nonce and sends the token back with the quote. An opened token proves
// that fleetd issued that nonce at that time and no earlier; the caller compares the issue time
// with the device's last accepted check (NetBox's last_boot_check), so a check that is replayed,
// or was made before a check fleetd already accepted, is refused.
//
// The token is sealed with AES-256-GCM under a key derived from the attestation token key with
// HKDF-SHA256 (info "fleetd boot-check nonce v1"), and bound to its purpose by its associated
// data, so it can never be opened as an enrollment token, nor an enrollment token as this one.

// The refusals of a boot-check nonce token.
const (
	CheckNonceInvalid Check = "nonce_invalid" // not sealed by this fleetd, or altered
	CheckNonceExpired Check = "nonce_expired" // older than boot_check.nonce_lifetime
)

const (
	bootNonceVersion = 1
	bootNonceAAD     = "fleetd boot-check nonce v1"
)

// BootNonceConfig configures a BootNonceSealer.
type BootNonceConfig struct {
	TokenKey []byte        // the attestation token key (TokenKeySize bytes); a subkey is derived from it
	Lifetime time.Duration // boot_check.nonce_lifetime
	Rand     io.Reader
	Now      func() time.Time
}

// BootNonceSealer issues and opens boot-check nonces.
type BootNonceSealer struct {
	box      sealBox
	lifetime time.Duration
	rand     io.Reader // draws the nonces
	now      func() time.Time
}

// BootNonce is one issued nonce and the token that vouches for it.
type BootNonce struct {
	Nonce     []byte
	Token     string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// bootNonceClaims is what a token carries: its own type, so that it never means an enrollment's
// TokenClaims.
type bootNonceClaims struct {
	Nonce     []byte    `json:"n"`
	IssuedAt  time.Time `json:"iat"`
	ExpiresAt time.Time `json:"exp"`
}

// NewBootNonceSealer derives the sealing key and returns a sealer.
func NewBootNonceSealer(cfg BootNonceConfig) (*BootNonceSealer, error) {
	if len(cfg.TokenKey) != TokenKeySize {
		return nil, fmt.Errorf("new boot-check nonce sealer: the token key is %d bytes, want %d", len(cfg.TokenKey), TokenKeySize)
	}
	if cfg.Lifetime <= 0 || cfg.Rand == nil || cfg.Now == nil {
		return nil, errors.New("new boot-check nonce sealer: a positive Lifetime, Rand and Now are needed")
	}
	key, err := hkdf.Key(sha256.New, cfg.TokenKey, nil, bootNonceAAD, TokenKeySize)
	if err != nil {
		return nil, fmt.Errorf("new boot-check nonce sealer: derive key: %w", err)
	}
	box, err := newSealBox(key, bootNonceVersion, bootNonceAAD, cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("new boot-check nonce sealer: %w", err)
	}
	return &BootNonceSealer{box: box, lifetime: cfg.Lifetime, rand: cfg.Rand, now: cfg.Now}, nil
}

// Issue draws a nonce and seals it with the current time.
func (s *BootNonceSealer) Issue() (BootNonce, error) {
	nonce, err := NewNonce(s.rand)
	if err != nil {
		return BootNonce{}, fmt.Errorf("issue boot-check nonce: %w", err)
	}
	c := bootNonceClaims{Nonce: nonce, IssuedAt: s.now().UTC()}
	c.ExpiresAt = c.IssuedAt.Add(s.lifetime)
	tok, err := s.box.seal(c)
	if err != nil {
		return BootNonce{}, fmt.Errorf("issue boot-check nonce: %w", err)
	}
	return BootNonce{Nonce: nonce, Token: tok, IssuedAt: c.IssuedAt, ExpiresAt: c.ExpiresAt}, nil
}

// Open authenticates a token a node presents and checks its expiry; it returns the nonce the
// quote must carry and the time fleetd issued it.
func (s *BootNonceSealer) Open(claimedToken string) (BootNonce, error) {
	var c bootNonceClaims
	switch err := s.box.open(claimedToken, &c); {
	case errors.Is(err, errNotAToken):
		return BootNonce{}, refuse(CheckNonceInvalid, "the token is not a fleetd boot-check nonce token: ask %s for a new one", "POST /v1/boot-check/nonce")
	case errors.Is(err, errNotSealed):
		return BootNonce{}, refuse(CheckNonceInvalid, "the nonce token was not issued by this fleetd or was altered")
	case err != nil:
		return BootNonce{}, fmt.Errorf("open boot-check nonce token: %w", err) // fleetd sealed it: our bug
	}
	if now := s.now(); !now.Before(c.ExpiresAt) {
		return BootNonce{}, refuse(CheckNonceExpired, "the nonce expired at %s (issued %s): ask for a new nonce and quote at once",
			c.ExpiresAt.Format(time.RFC3339Nano), c.IssuedAt.Format(time.RFC3339Nano))
	}
	return BootNonce{Nonce: c.Nonce, Token: claimedToken, IssuedAt: c.IssuedAt, ExpiresAt: c.ExpiresAt}, nil
}

package attest

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// sealBox seals JSON claims into the tokens fleetd hands out and reads back (the enrollment
// token, the boot-check nonce token): AES-256-GCM, as unpadded base64url of a version byte, a
// random GCM nonce and the ciphertext. The associated data binds a token to its purpose, so a
// token of one kind never opens as another.
type sealBox struct {
	aead    cipher.AEAD
	version byte
	aad     []byte
	rand    io.Reader
}

// The ways a presented token fails to open; each token kind turns them into its own refusal.
var (
	errNotAToken = errors.New("not a token of this kind")    // not base64, too short, another version
	errNotSealed = errors.New("not sealed here, or altered") // authentication failed
)

func newSealBox(key []byte, version byte, aad string, rnd io.Reader) (sealBox, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return sealBox{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealBox{}, err
	}
	return sealBox{aead: aead, version: version, aad: []byte(aad), rand: rnd}, nil
}

// seal encodes claims as JSON and seals them.
func (b sealBox) seal(claims any) (string, error) {
	plain, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	n := b.aead.NonceSize()
	out := make([]byte, 1+n, 1+n+len(plain)+b.aead.Overhead())
	out[0] = b.version
	if _, err := io.ReadFull(b.rand, out[1:]); err != nil {
		return "", fmt.Errorf("draw AEAD nonce: %w", err)
	}
	out = b.aead.Seal(out, out[1:], plain, b.aad) //nolint:gosec // G407: the nonce is out[1:], drawn from b.rand just above, not a fixed value
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// open authenticates and decrypts a presented token into claims. It returns errNotAToken or
// errNotSealed for a token that is not one of this box's, and any other error for sealed claims
// that do not decode (fleetd sealed them: a bug).
func (b sealBox) open(token string, claims any) error {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	n := b.aead.NonceSize()
	if err != nil || len(raw) < 1+n+b.aead.Overhead() || raw[0] != b.version {
		return errNotAToken
	}
	plain, err := b.aead.Open(nil, raw[1:1+n], raw[1+n:], b.aad)
	if err != nil {
		return errNotSealed
	}
	if err := json.Unmarshal(plain, claims); err != nil {
		return fmt.Errorf("decode sealed claims: %w", err)
	}
	return nil
}

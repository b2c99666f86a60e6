package fleet

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// The fetch secret binds a configuration fetch to the attested exchange (docs/security.md, "The
// configuration fetch"): a provision's evidence answer hands the agent a one-time random secret,
// the install carries it to whatever fetches the configuration, and the fetch must present it.
// The SMBIOS UUID and the address, the other two bindings, are not secrets: the UUID is broadcast
// at every PXE boot, and an address can be taken over while the machine reboots. NetBox keeps
// only the secret's SHA-256 (IdentityMaterial.FetchSecretSHA256); the secret itself exists in the
// evidence answer, in the Workflow's shared directory and on the installed disk until its fetch.

// fetchSecretBytes is the secret's entropy: 256 bits.
const fetchSecretBytes = 32

// CarriesFetchSecret reports whether a class kind's install can carry a fetch secret to its
// fetch: a NoCloud seed is fetched in HookOS by the install Workflow itself, right after the
// agent; a seed image's install writes the secret into the image for its first-boot fetch; a
// Talos install writes it into the disk's META partition (`fleetd talos-meta`), from which Talos
// fills the ${code} of its talos.config= URL. Every kind carries one.
func (k Kind) CarriesFetchSecret() bool {
	switch k {
	case KindCloudInit, KindNixOS, KindAlpine, KindTalos:
		return true
	}
	return false
}

// carrySecret says how a kind's fetch presents the secret, for the refusal of a fetch without one.
func (k Kind) carrySecret() string {
	if k == KindTalos {
		return "the talos.config= URL must carry code=${code}, and the install Template the talos-meta step that writes the secret into the disk's META (docs/operate.md)"
	}
	return "the install must pass the agent's fetch-secret file to the fetch"
}

// newFetchSecret is a fresh secret: 32 random bytes, unpadded base64url (43 characters), so it
// goes into a header, a file or a URL as it is.
func newFetchSecret(r io.Reader) (string, error) {
	b := make([]byte, fetchSecretBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("draw a fetch secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// FetchSecretHash is how a fetch secret is kept: the lowercase hex SHA-256 of its text.
func FetchSecretHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// MatchesFetchSecret reports whether claimed is the secret the attestation handed out, comparing
// the hashes in constant time (the hash of a wrong secret tells nothing of the right one, and
// the comparison's time tells nothing of the stored hash).
func (m IdentityMaterial) MatchesFetchSecret(claimed string) bool {
	claimed = strings.TrimSpace(claimed)
	if claimed == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(FetchSecretHash(claimed)), []byte(m.FetchSecretSHA256)) == 1
}

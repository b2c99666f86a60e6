package attest_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/attest"
)

func newSealer(t testing.TB, c *clock, key byte) *attest.TokenSealer {
	t.Helper()
	s, err := attest.NewTokenSealer(attest.TokenConfig{Key: bytes.Repeat([]byte{key}, 32), Lifetime: 10 * time.Minute,
		Rand: seeded(key), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestToken checks the sealed token on its own: what it carries back, and every way a token is
// refused (docs/design.md §4: bound to the device, the EK, the AK and an expiry).
func TestToken(t *testing.T) {
	c := &clock{testTime}
	s := newSealer(t, c, 1)
	ak := []byte("the AK's TPMT_PUBLIC")
	claims := attest.TokenClaims{DeviceID: 7, Device: "node-a", Request: "provision-k3f9x2mq", EKSHA256: strings.Repeat("ab", 32),
		HWSerialNum: []byte("hw"), AKDigest: sha256Of(ak), Secret: []byte("secret"), Nonce: []byte("nonce")}
	tok, err := s.Seal(claims)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tok, "secret") || bytes.Contains(mustB64(t, tok), []byte("secret")) {
		t.Fatal("the token shows its activation secret")
	}
	good := attest.Binding{DeviceID: 7, Device: "node-a", ApprovedEKs: []string{strings.Repeat("AB", 32)}, ClaimedAKPublic: ak}
	tests := []struct {
		name    string
		token   string
		binding func(b *attest.Binding)
		now     time.Time
		sealer  *attest.TokenSealer
		want    attest.Check // "" for success
	}{
		{name: "ok/within-lifetime", now: testTime.Add(10*time.Minute - time.Second)},
		{name: "refuse/expired", now: testTime.Add(10 * time.Minute), want: attest.CheckTokenExpired},
		{name: "refuse/other-device-id", binding: func(b *attest.Binding) { b.DeviceID = 8 }, want: attest.CheckTokenBinding},
		{name: "refuse/other-device-name", binding: func(b *attest.Binding) { b.Device = "node-b" }, want: attest.CheckTokenBinding},
		{name: "refuse/ek-unapproved", binding: func(b *attest.Binding) { b.ApprovedEKs = []string{strings.Repeat("cd", 32)} }, want: attest.CheckTokenBinding},
		{name: "refuse/other-ak", binding: func(b *attest.Binding) { b.ClaimedAKPublic = []byte("another AK") }, want: attest.CheckTokenBinding},
		{name: "refuse/other-key", sealer: newSealer(t, c, 2), want: attest.CheckToken},
		{name: "refuse/not-base64", token: "%%%", want: attest.CheckToken},
		{name: "refuse/too-short", token: base64.RawURLEncoding.EncodeToString([]byte{1, 2, 3}), want: attest.CheckToken},
		{name: "refuse/other-version", token: withByte(t, tok, 0, 2), want: attest.CheckToken},
		{name: "refuse/ciphertext-altered", token: withByte(t, tok, 20, 0xff), want: attest.CheckToken},
		{name: "refuse/tag-altered", token: withByte(t, tok, -1, 0x01), want: attest.CheckToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			if tc.binding != nil {
				tc.binding(&b)
			}
			c.t = testTime
			if !tc.now.IsZero() {
				c.t = tc.now
			}
			sealer := s
			if tc.sealer != nil {
				sealer = tc.sealer
			}
			token := tok
			if tc.token != "" {
				token = tc.token
			}
			opened, err := sealer.Open(token, b)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				got := opened.Claims()
				if got.Device != "node-a" || got.Request != claims.Request || !bytes.Equal(got.Secret, claims.Secret) ||
					!bytes.Equal(got.Nonce, claims.Nonce) || !got.ExpiresAt.Equal(testTime.Add(10*time.Minute)) {
					t.Errorf("claims = %+v, want what was sealed, expiring 10m after issue", got)
				}
				return
			}
			if r, ok := attest.AsRefusal(err); !ok || r.Check != tc.want {
				t.Errorf("err = %v, want a %s refusal", err, tc.want)
			}
		})
	}
}

// TestTokenConfig checks the sealer's configuration refusals and the key file formats.
func TestTokenConfig(t *testing.T) {
	hexKey := strings.Repeat("0f", 32) + "\n"
	if k, err := attest.ParseTokenKey([]byte(hexKey)); err != nil || len(k) != 32 || k[0] != 0x0f {
		t.Errorf("ParseTokenKey(hex) = %x, %v", k, err)
	}
	if k, err := attest.ParseTokenKey(bytes.Repeat([]byte{1}, 32)); err != nil || len(k) != 32 {
		t.Errorf("ParseTokenKey(raw) = %x, %v", k, err)
	}
	if _, err := attest.ParseTokenKey([]byte("short")); err == nil || !strings.Contains(err.Error(), "want 64 hex digits or 32 raw bytes, got 5 bytes") {
		t.Errorf("ParseTokenKey of a 5-byte key: %v, want an error naming both forms", err)
	}
	now := func() time.Time { return testTime }
	for name, cfg := range map[string]attest.TokenConfig{
		"refuse/short-key":     {Key: make([]byte, 16), Lifetime: time.Minute, Rand: seeded(1), Now: now},
		"refuse/no-lifetime":   {Key: make([]byte, 32), Rand: seeded(1), Now: now},
		"refuse/no-randomness": {Key: make([]byte, 32), Lifetime: time.Minute, Now: now},
	} {
		if _, err := attest.NewTokenSealer(cfg); err == nil {
			t.Errorf("%s: NewTokenSealer accepted %+v", name, cfg)
		}
	}
}

func withByte(t *testing.T, tok string, i int, x byte) string {
	t.Helper()
	raw := mustB64(t, tok)
	if i < 0 {
		i = len(raw) + i
	}
	if i == 0 {
		raw[0] = x
	} else {
		raw[i] ^= x
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package attest_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// TestBootNonce checks the boot check's nonce token on its own (docs/design.md §5 freshness): it gives
// back the nonce and issue time, expires, and is never confused with an enrollment token.
func TestBootNonce(t *testing.T) {
	c := &clock{testTime}
	newNonces := func(key byte) *attest.BootNonceSealer {
		s, err := attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: bytes.Repeat([]byte{key}, 32), Lifetime: 5 * time.Minute, Rand: seeded(key), Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newNonces(1)
	issued, err := s.Issue()
	if err != nil {
		t.Fatal(err)
	}
	enrollment, err := newSealer(t, c, 1).Seal(attest.TokenClaims{Device: "node-a", Nonce: issued.Nonce}) // same key
	if err != nil {
		t.Fatal(err)
	}
	version := mustB64(t, issued.Token)[0]
	// short is a token of the right version whose rest is n zero bytes: 12 are the AES-GCM
	// nonce and 16 its tag, the least a sealed token has.
	short := func(n int) string {
		return base64.RawURLEncoding.EncodeToString(append([]byte{version}, make([]byte, n)...))
	}
	tests := []struct {
		name   string
		token  string
		now    time.Time
		sealer *attest.BootNonceSealer
		want   attest.Check
		msg    string // a part of the refusal's message
	}{
		{name: "ok/within-lifetime", now: testTime.Add(5*time.Minute - time.Nanosecond)},
		{name: "refuse/expired", now: testTime.Add(5 * time.Minute), want: attest.CheckNonceExpired},
		{name: "refuse/other-key", sealer: newNonces(2), want: attest.CheckNonceInvalid},
		{name: "refuse/an-enrollment-token-sealed-with-the-same-key", token: enrollment, want: attest.CheckNonceInvalid},
		{name: "refuse/altered", token: withByte(t, issued.Token, 20, 0xff), want: attest.CheckNonceInvalid},
		{name: "refuse/not-base64", token: "%%%", want: attest.CheckNonceInvalid, msg: "is not a fleetd boot-check nonce token"},
		{name: "refuse/the-version-and-5-bytes", token: short(5), want: attest.CheckNonceInvalid, msg: "is not a fleetd boot-check nonce token"},
		{name: "refuse/a-byte-shorter-than-a-nonce-and-a-tag", token: short(27), want: attest.CheckNonceInvalid, msg: "is not a fleetd boot-check nonce token"},
		{name: "refuse/as-long-as-a-nonce-and-a-tag-but-not-sealed", token: short(28), want: attest.CheckNonceInvalid, msg: "was not issued by this fleetd or was altered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.t = testTime
			if !tc.now.IsZero() {
				c.t = tc.now
			}
			sealer, token := s, issued.Token
			if tc.sealer != nil {
				sealer = tc.sealer
			}
			if tc.token != "" {
				token = tc.token
			}
			got, err := sealer.Open(token)
			if tc.want == "" {
				if err != nil || !bytes.Equal(got.Nonce, issued.Nonce) || !got.IssuedAt.Equal(testTime) || len(got.Nonce) != attest.NonceSize {
					t.Fatalf("Open: %+v, %v; want nonce %x issued at %v", got, err, issued.Nonce, testTime)
				}
				return
			}
			if r, ok := attest.AsRefusal(err); !ok || r.Check != tc.want || !strings.Contains(r.Msg, tc.msg) {
				t.Fatalf("Open: %v, want refusal %s saying %q", err, tc.want, tc.msg)
			}
		})
	}
	t.Run("refuse/a-boot-nonce-token-as-an-enrollment-token", func(t *testing.T) {
		c.t = testTime
		_, err := newSealer(t, c, 1).Open(issued.Token, attest.Binding{Device: "node-a"})
		if r, ok := attest.AsRefusal(err); !ok || r.Check != attest.CheckToken {
			t.Fatalf("the enrollment sealer opened a boot-check token: %v", err)
		}
	})
}

// TestBootNonceConfig: a nonce sealer needs the token key's size, a positive lifetime, its
// randomness and its clock.
func TestBootNonceConfig(t *testing.T) {
	ok := attest.BootNonceConfig{TokenKey: make([]byte, attest.TokenKeySize), Lifetime: time.Nanosecond, Rand: seeded(1), Now: time.Now}
	if _, err := attest.NewBootNonceSealer(ok); err != nil {
		t.Errorf("ok/the shortest lifetime: %v", err)
	}
	for _, r := range []struct {
		name string
		edit func(*attest.BootNonceConfig)
		want string
	}{
		{"refuse/a key of 31 bytes", func(c *attest.BootNonceConfig) { c.TokenKey = c.TokenKey[:31] }, "the token key is 31 bytes, want 32"},
		{"refuse/no lifetime", func(c *attest.BootNonceConfig) { c.Lifetime = 0 }, "a positive Lifetime"},
		{"refuse/a negative lifetime", func(c *attest.BootNonceConfig) { c.Lifetime = -time.Second }, "a positive Lifetime"},
		{"refuse/no randomness", func(c *attest.BootNonceConfig) { c.Rand = nil }, "Rand and Now"},
		{"refuse/no clock", func(c *attest.BootNonceConfig) { c.Now = nil }, "Rand and Now"},
	} {
		cfg := ok
		r.edit(&cfg)
		if _, err := attest.NewBootNonceSealer(cfg); err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: %v, want %q", r.name, err, r.want)
		}
	}
}

// TestLAKVerifier checks which certificates identify a device for a boot check: only a LAK
// issued by the fleet's LAK CA itself, valid now (docs/design.md §5).
func TestLAKVerifier(t *testing.T) {
	c := &clock{testTime}
	lakCA := newTestCA(t, "fleet LAK CA")
	ldevidCA := siblingCA(t, lakCA, "fleet LDevID CA") // same root: an LDevID chains to it too
	otherCA := newTestCA(t, "another CA")
	akKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	id := pki.Identity{DeviceName: "node-a", DeviceSerial: "SN-1", HWSerialNum: []byte{1}}
	issue := func(ldevid, lak *pki.CA, asLAK bool) [][]byte {
		i, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ldevid, LAK: lak, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		issue := i.IssueLDevID
		if asLAK {
			issue = i.IssueLAK
		}
		cert, err := issue(id, akKey.Public())
		if err != nil {
			t.Fatal(err)
		}
		return cert.DER()
	}
	good := issue(ldevidCA, lakCA, true)
	v, err := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: lakCA.Cert, Above: lakCA.Above, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		chain   [][]byte
		now     time.Time
		want    attest.Check
		wantMsg string
	}{
		{name: "ok/the-fleet's-LAK", chain: good},
		{name: "ok/leaf-only", chain: good[:1]},
		{name: "refuse/no-certificate", want: attest.CheckLAKMalformed},
		{name: "refuse/not-DER", chain: [][]byte{[]byte("not a certificate")}, want: attest.CheckLAKMalformed},
		{name: "refuse/another-CA", chain: issue(otherCA, otherCA, true), want: attest.CheckLAKUntrusted, wantMsg: "not by the fleet's LAK CA"},
		{name: "refuse/an-LDevID-CA-under-the-same-root", chain: issue(ldevidCA, ldevidCA, true), want: attest.CheckLAKUntrusted},
		{name: "refuse/an-LDevID-of-the-LAK-CA", chain: issue(lakCA, lakCA, false), want: attest.CheckLAKUntrusted, wantMsg: "tcg-kp-AIKCertificate"},
		// The rows before cached good: past its validity it is verified in full again, and refused.
		{name: "refuse/expired", chain: good, now: testTime.Add(2 * time.Hour), want: attest.CheckLAKUntrusted, wantMsg: "expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.t = testTime
			if !tc.now.IsZero() {
				c.t = tc.now
			}
			lak, err := v.Verify(tc.chain)
			if tc.want == "" {
				if err != nil || lak.Device != "node-a" || !strings.EqualFold(lak.SerialHex, serialOf(t, good[0])) {
					t.Fatalf("Verify: %+v, %v", lak, err)
				}
				return
			}
			r, ok := attest.AsRefusal(err)
			if !ok || r.Check != tc.want || !strings.Contains(r.Msg, tc.wantMsg) {
				t.Fatalf("Verify: %v, want refusal %s containing %q", err, tc.want, tc.wantMsg)
			}
		})
	}
	c.t = testTime
	t.Run("AK", func(t *testing.T) { testLAKAK(t, v, good, akKey) })
}

// testLAKAK checks the AK public area a node sends against the certified key.
func testLAKAK(t *testing.T, v *attest.LAKVerifier, chain [][]byte, akKey *rsa.PrivateKey) {
	lak, err := v.Verify(chain)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	restricted := tpm2.FlagRestricted | tpm2.FlagSign | tpm2.FlagFixedTPM | tpm2.FlagFixedParent | tpm2.FlagSensitiveDataOrigin | tpm2.FlagUserWithAuth
	for _, tc := range []struct {
		name  string
		key   *rsa.PrivateKey
		attrs tpm2.KeyProp
		ok    bool
	}{
		{name: "ok/the-certified-AK", key: akKey, attrs: restricted, ok: true},
		{name: "refuse/another-key", key: other, attrs: restricted},
		{name: "refuse/not-restricted", key: akKey, attrs: restricted &^ tpm2.FlagRestricted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := tpm2.Public{Type: tpm2.AlgRSA, NameAlg: tpm2.AlgSHA256, Attributes: tc.attrs,
				RSAParameters: &tpm2.RSAParams{Sign: &tpm2.SigScheme{Alg: tpm2.AlgRSASSA, Hash: tpm2.AlgSHA256}, KeyBits: 2048,
					ModulusRaw: tc.key.N.Bytes()}}.Encode()
			if err != nil {
				t.Fatal(err)
			}
			ak, err := lak.AK(pub)
			if tc.ok != (err == nil) {
				t.Fatalf("AK: %v, want ok=%v", err, tc.ok)
			}
			if r, isRefusal := attest.AsRefusal(err); err != nil && (!isRefusal || r.Check != attest.CheckLAKMismatch) {
				t.Fatalf("AK: %v, want refusal %s", err, attest.CheckLAKMismatch)
			}
			if tc.ok && !akKey.PublicKey.Equal(ak.Public) {
				t.Fatal("the verified AK is not the certified key")
			}
		})
	}
}

func newTestCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: name, Lifetime: 24 * time.Hour, Rand: rand.Reader, Now: func() time.Time { return testTime.Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// siblingCA re-signs ca's issuing certificate under a new root and makes another issuing CA
// under the same root, as a fleet whose LDevID and LAK CAs share one root has.
func siblingCA(t *testing.T, ca *pki.CA, name string) *pki.CA {
	t.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := func(serial int64, cn string) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: testTime.Add(-time.Hour), NotAfter: testTime.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	}
	rootDER, _ := x509.CreateCertificate(rand.Reader, tmpl(1, "shared root"), tmpl(1, "shared root"), rootKey.Public(), rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	serial := big.NewInt(10)
	resign := func(cert *x509.Certificate, pub any) *x509.Certificate {
		der, err := x509.CreateCertificate(rand.Reader, tmpl(serial.Add(serial, big.NewInt(1)).Int64(), cert.Subject.CommonName), root, pub, rootKey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	ca.Cert, ca.Above = resign(ca.Cert, ca.Signer.Public()), []*x509.Certificate{root}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return &pki.CA{Cert: resign(&x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: name}}, key.Public()),
		Above: []*x509.Certificate{root}, Signer: key}
}

func serialOf(t *testing.T, der []byte) string {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(c.SerialNumber.Bytes())
}

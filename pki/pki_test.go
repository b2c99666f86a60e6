package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/pki"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func seeded(seed byte) *mrand.ChaCha8 { return mrand.NewChaCha8([32]byte{seed}) }

func newCA(t testing.TB, name string) *pki.CA {
	t.Helper()
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: name, Rand: seeded(1), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newIssuer(t testing.TB) (*pki.Issuer, *pki.CA, *pki.CA) {
	t.Helper()
	devid, lak := newCA(t, "fleetd DevID"), newCA(t, "fleetd LAK")
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: devid, LAK: lak,
		LDevIDLifetime: 90 * 24 * time.Hour, LAKLifetime: 30 * 24 * time.Hour,
		Rand: seeded(2), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return iss, devid, lak
}

func p256(t testing.TB) crypto.PublicKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

var id = pki.Identity{DeviceName: "node-a", DeviceSerial: "SN-0042", HWSerialNum: []byte("00001014:2f6d51db:4d5")}

// TestProfiles parses issued certificates back and checks every property of docs/design.md §4's profiles.
func TestProfiles(t *testing.T) {
	iss, devidCA, lakCA := newIssuer(t)
	tests := []struct {
		name         string
		issue        func(pki.Identity, crypto.PublicKey) (*pki.Certificate, error)
		ca           *pki.CA
		lifetime     time.Duration
		wantPolicies []x509.OID
		wantEKU      []asn1.ObjectIdentifier
	}{
		{"ok/ldevid", iss.IssueLDevID, devidCA, 90 * 24 * time.Hour,
			[]x509.OID{pki.PolicyVerifiedTPMResidency, pki.PolicyVerifiedTPMFixed}, nil},
		{"ok/lak", iss.IssueLAK, lakCA, 30 * 24 * time.Hour,
			[]x509.OID{pki.PolicyVerifiedTPMResidency, pki.PolicyVerifiedTPMRestricted},
			[]asn1.ObjectIdentifier{pki.OIDAIKCertificate}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := p256(t)
			c, err := tc.issue(id, pub)
			if err != nil {
				t.Fatal(err)
			}
			// Parse back from the PEM the agent writes: leaf then chain.
			certs, err := pki.ParseCertificatesPEM(c.PEM())
			if err != nil {
				t.Fatal(err)
			}
			leaf := certs[0]
			if len(certs) != 2 || !certs[1].Equal(tc.ca.Cert) {
				t.Errorf("PEM holds %d certificates, want the leaf then the issuing CA (no root)", len(certs))
			}
			checkIdentity(t, leaf)
			if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(pub) {
				t.Error("the certificate is not for the key it was issued for")
			}
			if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("KeyUsage = %b, want digitalSignature only", leaf.KeyUsage)
			}
			if !leaf.BasicConstraintsValid || leaf.IsCA {
				t.Error("basicConstraints is not CA:false")
			}
			if !slices.EqualFunc(leaf.Policies, tc.wantPolicies, func(a, b x509.OID) bool { return a.Equal(b) }) {
				t.Errorf("Policies = %v, want %v", leaf.Policies, tc.wantPolicies)
			}
			if !slices.EqualFunc(leaf.UnknownExtKeyUsage, tc.wantEKU, func(a, b asn1.ObjectIdentifier) bool { return a.Equal(b) }) {
				t.Errorf("EKU = %v, want %v", leaf.UnknownExtKeyUsage, tc.wantEKU)
			}
			if got := leaf.NotAfter.Sub(t0); got != tc.lifetime {
				t.Errorf("lifetime = %v, want %v", got, tc.lifetime)
			}
			if leaf.SerialNumber.Sign() <= 0 || leaf.SerialNumber.BitLen() < 64 || c.SerialHex() != leaf.SerialNumber.Text(16) {
				t.Errorf("serial %x is not a positive number of at least 64 bits (SerialHex %s)", leaf.SerialNumber, c.SerialHex())
			}
			// Go's own verifier (what SPIRE's tpm_devid runs) accepts the chain: no unhandled
			// critical extension, roots from the CA file, intermediates from the PEM.
			inter := x509.NewCertPool()
			for _, x := range certs[1:] {
				inter.AddCert(x)
			}
			opts := x509.VerifyOptions{Roots: tc.ca.Roots(), Intermediates: inter, CurrentTime: t0,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("the certificate does not chain to its CA's root: %v", err)
			}
			other := newCA(t, "other")
			opts.Roots = other.Roots()
			if _, err := leaf.Verify(opts); err == nil {
				t.Error("the certificate verifies under an unrelated root")
			}
		})
	}
}

func checkIdentity(t *testing.T, leaf *x509.Certificate) {
	t.Helper()
	if leaf.Subject.CommonName != "node-a" || leaf.Subject.SerialNumber != "SN-0042" {
		t.Errorf("subject = %v, want CN=node-a, serialNumber=SN-0042", leaf.Subject)
	}
	if len(leaf.UnhandledCriticalExtensions) != 0 {
		t.Errorf("unhandled critical extensions %v", leaf.UnhandledCriticalExtensions)
	}
	hwType, hwSerial, critical, err := pki.HardwareModuleName(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if critical || !hwType.Equal(pki.OIDHWTypeTPM20) || string(hwSerial) != string(id.HWSerialNum) {
		t.Errorf("hardwareModuleName = {%v %q} critical=%v, want {2.23.133.1.2 %q} non-critical",
			hwType, hwSerial, critical, id.HWSerialNum)
	}
}

// TestSerialsUnique checks that serials do not repeat across many issues from one Issuer.
func TestSerialsUnique(t *testing.T) {
	iss, _, _ := newIssuer(t)
	pub := p256(t)
	seen := map[string]bool{}
	for range 200 {
		c, err := iss.IssueLDevID(id, pub)
		if err != nil {
			t.Fatal(err)
		}
		if seen[c.SerialHex()] {
			t.Fatalf("serial %s issued twice", c.SerialHex())
		}
		seen[c.SerialHex()] = true
	}
}

// TestIssueRefusals checks what the issuer refuses to certify.
func TestIssueRefusals(t *testing.T) {
	iss, _, _ := newIssuer(t)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	tests := []struct {
		name string
		id   pki.Identity
		pub  crypto.PublicKey
		want string
	}{
		{"refuse/no-device-name", pki.Identity{HWSerialNum: []byte("x")}, p256(t), "device name"},
		{"refuse/no-hw-serial", pki.Identity{DeviceName: "node-a"}, p256(t), "hwSerialNum"},
		{"refuse/rsa-1024", id, small.Public(), "1024 bits"},
		{"refuse/ed25519", id, edPub, "cannot be certified"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := iss.IssueLDevID(tc.id, tc.pub)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCertifiedKeys: the keys a TPM can hold for an LDevID or an AK are certified (ECDSA P-256
// and P-384, RSA from 2048 bits), and no other.
func TestCertifiedKeys(t *testing.T) {
	iss, _, _ := newIssuer(t)
	ecdsaKey := func(c elliptic.Curve) crypto.PublicKey {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k.Public()
	}
	rsaKey := func(bits int) crypto.PublicKey {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		return k.Public()
	}
	for _, r := range []struct {
		name string
		pub  crypto.PublicKey
		want string // "" certified
	}{
		{"ok/ECDSA P-256", ecdsaKey(elliptic.P256()), ""},
		{"ok/ECDSA P-384", ecdsaKey(elliptic.P384()), ""},
		{"ok/RSA 2048", rsaKey(2048), ""},
		{"refuse/ECDSA P-521", ecdsaKey(elliptic.P521()), "curve P-521: P-256 or P-384 expected"},
		{"refuse/ECDSA P-224", ecdsaKey(elliptic.P224()), "curve P-224: P-256 or P-384 expected"},
		{"refuse/RSA 2047", rsaKey(2047), "RSA key of 2047 bits"},
	} {
		for _, issue := range []func(pki.Identity, crypto.PublicKey) (*pki.Certificate, error){iss.IssueLDevID, iss.IssueLAK} {
			c, err := issue(id, r.pub)
			switch {
			case r.want == "" && err != nil:
				t.Errorf("%s: %v", r.name, err)
			case r.want == "" && !c.Leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(r.pub):
				t.Errorf("%s: the certificate is not for the key", r.name)
			case r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)):
				t.Errorf("%s: %v, want %q", r.name, err, r.want)
			}
		}
	}
}

// TestRootsAndFiles: a verifier's root pool and the root file hold the CA's root (the last
// certificate above the issuing CA), or the issuing CA itself when nothing is above it; the dev
// CAs are a root that may sign one CA and an issuing CA that may sign none.
func TestRootsAndFiles(t *testing.T) {
	twoLevel := newCA(t, "fleetd DevID")
	root := twoLevel.Above[0]
	if root.MaxPathLen != 1 || root.MaxPathLenZero || twoLevel.Cert.MaxPathLen != 0 || !twoLevel.Cert.MaxPathLenZero {
		t.Errorf("path lengths: root %d (zero %v), issuing CA %d (zero %v); want 1, and 0 stated",
			root.MaxPathLen, root.MaxPathLenZero, twoLevel.Cert.MaxPathLen, twoLevel.Cert.MaxPathLenZero)
	}
	under, rootKey, err := pki.NewCA(pki.NewCAConfig{Name: "alone", Rand: seeded(5), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	alone := &pki.CA{Cert: under.Above[0], Signer: rootKey} // a root that issues itself
	dir := t.TempDir()
	for _, r := range []struct {
		name string
		ca   *pki.CA
		root *x509.Certificate
	}{
		{"ok/issuing CA under a root: the root", twoLevel, root},
		{"ok/a root alone: itself", alone, alone.Cert},
	} {
		want := x509.NewCertPool()
		want.AddCert(r.root)
		if !r.ca.Roots().Equal(want) {
			t.Errorf("%s: Roots() is not the pool of %s", r.name, r.root.Subject)
		}
		files, err := r.ca.WriteFiles(dir, strings.ReplaceAll(r.name, "/", "-"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(files.Root)
		if got, err := pki.ParseCertificatesPEM(b); err != nil || len(got) != 1 || !got[0].Equal(r.root) {
			t.Errorf("%s: the root file holds %d certificates (%v), want %s alone", r.name, len(got), err, r.root.Subject)
		}
		leaf, err := mustIssuer(t, r.ca).IssueLDevID(id, p256(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: r.ca.Roots(), CurrentTime: t0, Intermediates: pool(leaf.Chain),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s: a certificate it issued does not verify under its roots: %v", r.name, err)
		}
	}
}

// pool is a pool of the certificates.
func pool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// TestParseCertificatesPEMNamesTheBadOne: a block that is not a certificate is named by its
// place in the file.
func TestParseCertificatesPEMNamesTheBadOne(t *testing.T) {
	ca := newCA(t, "fleetd DevID")
	b := append(pki.EncodeCertificatesPEM(ca.Cert), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")...)
	if _, err := pki.ParseCertificatesPEM(b); err == nil || !strings.Contains(err.Error(), "parse certificate 2:") {
		t.Errorf("a file whose second block is not a certificate: %v, want an error naming certificate 2", err)
	}
}

// TestLifetimeCappedByCA checks that a certificate never outlives its issuing CA.
func TestLifetimeCappedByCA(t *testing.T) {
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "short", Lifetime: 24 * time.Hour, Rand: seeded(3),
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: 90 * 24 * time.Hour,
		LAKLifetime: time.Hour, Rand: seeded(4), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := iss.IssueLDevID(id, p256(t))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter = %v, want the CA's %v", c.Leaf.NotAfter, ca.Cert.NotAfter)
	}
}

// TestLoadCA writes a CA the way the development stack does and loads it the way fleetd does,
// then checks LoadCA's refusals.
func TestLoadCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleetd DevID")
	files, err := ca.WriteFiles(dir, "ldevid-ca")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := pki.LoadCA(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || len(loaded.Above) != 1 || len(loaded.Chain()) != 1 {
		t.Errorf("loaded CA %v with %d above, want the issuing CA with its root", loaded.Cert.Subject, len(loaded.Above))
	}
	if st, _ := os.Stat(files.Key); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}

	other := newCA(t, "other")
	otherFiles, _ := other.WriteFiles(dir, "other")
	certPEM, _ := os.ReadFile(files.Cert)
	rootPEM, _ := os.ReadFile(files.Root)
	keyPEM, _ := os.ReadFile(files.Key)
	otherKey, _ := os.ReadFile(otherFiles.Key)
	leaf, _ := mustIssuer(t, ca).IssueLDevID(id, p256(t))
	tests := []struct {
		name          string
		certPEM, keyP []byte
		want          string
	}{
		{"refuse/key-of-another-ca", certPEM, otherKey, "not the key"},
		{"refuse/root-before-issuing-ca", append(rootPEM, pki.EncodeCertificatesPEM(ca.Cert)...), keyPEM, "not the key"},
		{"refuse/leaf-is-not-a-ca", leaf.PEM(), keyPEM, "not a CA"},
		{"refuse/key-in-cert-file", append(certPEM, keyPEM...), keyPEM, "PRIVATE KEY"},
		{"refuse/empty-cert-file", nil, keyPEM, "no CERTIFICATE"},
		{"refuse/chain-out-of-order", pki.EncodeCertificatesPEM(ca.Cert, other.Above[0]), keyPEM, "not signed by the next"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, k := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
			_ = os.WriteFile(c, tc.certPEM, 0o600)
			_ = os.WriteFile(k, tc.keyP, 0o600)
			_, err := pki.LoadCA(c, k)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func mustIssuer(t *testing.T, ca *pki.CA) *pki.Issuer {
	t.Helper()
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour,
		Rand: seeded(5), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

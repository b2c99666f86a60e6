package attest_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"os"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
	"github.com/folly-infra/fleetd/pki"
)

// useEKPolicy sends the row's round trips to a fleetd under another EK policy (the row's
// deferred restore goes back to the scenario's).
func useEKPolicy(t *testing.T, s *scenario, p attest.EKPolicy, bundle []byte) {
	t.Helper()
	s.v.another(t, func(c *handlerstest.Config) { c.EKPolicy, c.EKBundle = p, bundle })
}

func swtpmBundle(t testing.TB) []byte {
	t.Helper()
	ca, err := swtpm.ReadEKCA(swtpmCADir)
	if err != nil {
		t.Fatal(err)
	}
	return ca.BundlePEM()
}

func swtpmRootOnly(t testing.TB) []byte {
	t.Helper()
	ca, err := swtpm.ReadEKCA(swtpmCADir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(ca.RootPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ekCertFrom issues a TCG-style EK certificate (critical SAN directoryName with the TPM
// manufacturer, EKU tcg-kp-EKCertificate) for the key in ekPubDER, or for a fresh RSA key when
// ekPubDER is nil, from ca.
func ekCertFrom(t testing.TB, ca *pki.CA, ekPubDER []byte) []byte {
	t.Helper()
	return ekCertFor(t, ca, ekPubDER, "2.0")
}

// ekCertFor is ekCertFrom naming the TPM specification family in its subjectDirectoryAttributes
// (tcg-at-tpmSpecification: family, level 0, revision 1.38), or none with "".
func ekCertFor(t testing.TB, ca *pki.CA, ekPubDER []byte, family string) []byte {
	t.Helper()
	var pub any
	if ekPubDER == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub = k.Public()
	} else {
		var err error
		if pub, err = x509.ParsePKIXPublicKey(ekPubDER); err != nil {
			t.Fatal(err)
		}
	}
	dirName, err := asn1.Marshal(pkix.RDNSequence{
		{{Type: asn1.ObjectIdentifier{2, 23, 133, 2, 1}, Value: "id:49465800"}},
		{{Type: asn1.ObjectIdentifier{2, 23, 133, 2, 2}, Value: "SLB9670"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	san, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: dirName}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:       big.NewInt(0x4d5),
		NotBefore:          testTime.AddDate(-1, 0, 0),
		NotAfter:           testTime.AddDate(10, 0, 0),
		KeyUsage:           x509.KeyUsageKeyEncipherment,
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}},
		ExtraExtensions:    []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Critical: true, Value: san}},
	}
	if family != "" {
		spec, err := asn1.Marshal(struct {
			Family          string `asn1:"utf8"`
			Level, Revision int
		}{family, 0, 138})
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := asn1.Marshal([]struct {
			Type   asn1.ObjectIdentifier
			Values []asn1.RawValue `asn1:"set"`
		}{{asn1.ObjectIdentifier{2, 23, 133, 2, 16}, []asn1.RawValue{{FullBytes: spec}}}})
		if err != nil {
			t.Fatal(err)
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 9}, Value: attrs})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Signer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// untrustedEKCert is an EK certificate from a CA no bundle of these tests holds.
func untrustedEKCert(t testing.TB, ekPubDER []byte) []byte {
	t.Helper()
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "Untrusted TPM Vendor", Rand: seeded(30), Now: func() time.Time { return testTime }})
	if err != nil {
		t.Fatal(err)
	}
	return ekCertFrom(t, ca, ekPubDER)
}

// tpmKeyParams creates an RSA signing key with the given attributes under the TPM's SRK and
// returns its creation attestation signed by itself: what a machine would send as its AK if it
// tried to pass off a key that is not an attestation key.
func tpmKeyParams(t *testing.T, m *machine, attrs tpm2.KeyProp) ga.AttestationParameters {
	t.Helper()
	const srk = 0x81000001 // go-attestation's SRK, persisted by NewAK
	tmpl := tpm2.Public{
		Type: tpm2.AlgRSA, NameAlg: tpm2.AlgSHA256, Attributes: attrs,
		RSAParameters: &tpm2.RSAParams{Sign: &tpm2.SigScheme{Alg: tpm2.AlgRSASSA, Hash: tpm2.AlgSHA256}, KeyBits: 2048},
	}
	priv, pub, cdata, chash, ticket, err := tpm2.CreateKey(m.rw, srk, tpm2.PCRSelection{}, "", "", tmpl)
	if err != nil {
		t.Fatalf("create a key with attributes 0x%x: %v", uint32(attrs), err)
	}
	h, _, err := tpm2.Load(m.rw, srk, "", pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tpm2.FlushContext(m.rw, h); err != nil {
			t.Errorf("flush the key: %v", err)
		}
	}()
	att, sig, err := tpm2.CertifyCreation(m.rw, "", h, h, nil, chash, *tmpl.RSAParameters.Sign, ticket)
	if err != nil {
		t.Fatal(err)
	}
	return ga.AttestationParameters{Public: pub, CreateData: cdata, CreateAttestation: att, CreateSignature: sig}
}

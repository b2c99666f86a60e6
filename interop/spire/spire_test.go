package spire_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // SPIRE's agent ID and CA selectors are SHA-1 fingerprints
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/pki"
)

// TestSPIREAttestsFleetdLDevID enrolls a swtpm through fleetd, then has SPIRE's own tpm_devid
// agent plugin attest with the files `fleetd enroll` wrote (ldevid.pem, ldevid.pub, ldevid.priv)
// on that same TPM, to SPIRE's own tpm_devid server plugin trusting fleetd's LDevID root
// (devid_ca_path) and the swtpm EK CA (endorsement_ca_path). SPIRE must accept fleetd's LDevID
// unchanged and name the agent as SPIRE derives it (docs/design.md §2 "LDevID"); each refusal row changes
// one thing SPIRE checks, so the test fails if SPIRE stops checking it or fleetd starts issuing
// something SPIRE refuses.
func TestSPIREAttestsFleetdLDevID(t *testing.T) {
	m := enroll(t)
	written, err := os.ReadFile(m.file(agent.FileLDevIDCert))
	must(t, err)
	certs, err := pki.ParseCertificatesPEM(written)
	must(t, err)
	leaf, ca := certs[0], m.fleetd.ldevidCA

	if got, want := m.fleetd.inv.Get(deviceID).Owned.LDevIDSerial, hex.EncodeToString(leaf.SerialNumber.Bytes()); got != want {
		t.Fatalf("NetBox records LDevID %s, the agent wrote %s", got, want)
	}
	ekBundle := writeTemp(t, "ek-ca.pem", ekCA.BundlePEM())
	root := m.fleetd.ldevidCAFiles.Root

	rows := []struct {
		name     string
		certPEM  []byte // devid_cert_path's content
		devIDCA  string // devid_ca_path
		ekBundle string // endorsement_ca_path
		wantErr  string // "" = accepted
	}{
		{name: "ok/the LDevID fleetd issued, as written", certPEM: written, devIDCA: root, ekBundle: ekBundle},
		{name: "ok/devid_ca_path holding the issuing CA and the root, as stack.json's ca.ldevid", certPEM: written,
			devIDCA: m.fleetd.ldevidCAFiles.Cert, ekBundle: ekBundle},
		{name: "refuse/empty subject with a critical SAN", certPEM: emptySubject(t, ca, leaf), devIDCA: root, ekBundle: ekBundle,
			wantErr: "unable to verify DevID signature: verification failed: x509: unhandled critical extension"},
		{name: "refuse/issued by a CA SPIRE does not trust", certPEM: issue(t, otherCA(t), leaf.PublicKey, leaf), devIDCA: root, ekBundle: ekBundle,
			wantErr: "unable to verify DevID signature: verification failed: x509: certificate signed by unknown authority"},
		{name: "refuse/fleetd's CA, but a key outside this TPM", certPEM: issue(t, ca, softwareKey(t), leaf), devIDCA: root, ekBundle: ekBundle,
			wantErr: "devID challenge verification failed"},
		{name: "refuse/EK bundle without the EK's issuing CA", certPEM: written, devIDCA: root, ekBundle: ekCA.RootPath,
			wantErr: "cannot verify EK signature: endorsement certificate verification failed: x509: certificate signed by unknown authority"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			server := spireServer(t, r.devIDCA, r.ekBundle)
			a := spireAgent(t, writeTemp(t, "devid.pem", r.certPEM), m.file(agent.FileLDevIDPub), m.file(agent.FileLDevIDPriv), m.tpm.Spec())
			got, err := attestNode(context.Background(), a, server)
			if r.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), r.wantErr) {
					t.Fatalf("SPIRE's answer: %v (result %v), want a refusal with %q", err, got, r.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SPIRE refused fleetd's LDevID: %v", err)
			}
			if want := "spiffe://" + trustDomain + "/spire/agent/tpm_devid/" + fingerprint(leaf); got.AgentID != want {
				t.Errorf("agent ID %s, want %s (the SHA-1 of ldevid.pem's leaf)", got.AgentID, want)
			}
			want := []string{"tpm_devid:subject:cn:" + deviceName, "tpm_devid:issuer:cn:fleetd LDevID CA",
				"tpm_devid:ca:fingerprint:" + fingerprint(ca.Cert), "tpm_devid:ca:fingerprint:" + fingerprint(ca.Above[0])}
			var sel []string
			for _, s := range got.Selectors {
				sel = append(sel, s.Type+":"+s.Value)
			}
			if diff := cmp.Diff(want, sel); diff != "" {
				t.Errorf("selectors (-want +got):\n%s", diff)
			}
			if !got.CanReattest {
				t.Error("SPIRE does not let the agent re-attest with its LDevID")
			}
		})
	}
}

// emptySubject is the written LDevID re-issued by fleetd's CA with an empty subject, which RFC
// 5280 answers with a critical SAN: the profile fleetd must not issue (RFC 5280 §4.2.1.6;
// docs/enrollment.md).
func emptySubject(t *testing.T, ca *pki.CA, leaf *x509.Certificate) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: leaf.SerialNumber, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
		KeyUsage: leaf.KeyUsage, BasicConstraintsValid: true, Policies: leaf.Policies}
	for _, e := range leaf.Extensions {
		if e.Id.Equal(pki.OIDSubjectAltName) {
			e.Critical = true
			tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, e)
		}
	}
	if len(tmpl.ExtraExtensions) != 1 {
		t.Fatal("fleetd's LDevID has no SAN to make critical")
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, leaf.PublicKey, ca.Signer)
	must(t, err)
	c, err := x509.ParseCertificate(der)
	must(t, err)
	return pki.EncodeCertificatesPEM(append([]*x509.Certificate{c}, ca.Chain()...)...)
}

// issue is an LDevID for pub with the written leaf's identity, issued by ca through fleetd's
// own issuer, as ldevid.pem would hold it.
func issue(t *testing.T, ca *pki.CA, pub any, leaf *x509.Certificate) []byte {
	t.Helper()
	_, hw, _, err := pki.HardwareModuleName(leaf)
	must(t, err)
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: time.Hour, LAKLifetime: time.Hour, Rand: rand.Reader, Now: time.Now})
	must(t, err)
	c, err := iss.IssueLDevID(pki.Identity{DeviceName: leaf.Subject.CommonName, DeviceSerial: leaf.Subject.SerialNumber, HWSerialNum: hw}, pub)
	must(t, err)
	return c.PEM()
}

func otherCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "Other LDevID", Rand: rand.Reader, Now: time.Now})
	must(t, err)
	return ca
}

func softwareKey(t *testing.T) any {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	return k.Public()
}

// fingerprint is how SPIRE names a certificate: the hex SHA-1 of its DER.
func fingerprint(c *x509.Certificate) string {
	sum := sha1.Sum(c.Raw) //nolint:gosec // SPIRE's naming
	return hex.EncodeToString(sum[:])
}

func writeTemp(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	must(tb, os.WriteFile(p, data, 0o644))
	return p
}

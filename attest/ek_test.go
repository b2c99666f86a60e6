package attest_test

import (
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// TestEKVerify checks EK approval over certificates made in memory with the TCG EK profile's
// critical SAN: the chain under hash+cert, the cert's key, the hwSerialNum the LDevID SAN gets,
// and that the hash policy approves by hash without trusting the certificate's issuer.
func TestEKVerify(t *testing.T) {
	vendor, _, err := pki.NewCA(pki.NewCAConfig{Name: "TPM Vendor", Rand: seeded(40), Now: func() time.Time { return testTime }})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	spki, _ := x509.MarshalPKIXPublicKey(key.Public())
	certDER := ekCertFrom(t, vendor, spki)
	cert, _ := x509.ParseCertificate(certDER)
	bundle := pki.EncodeCertificatesPEM(vendor.Cert) // the issuing CA alone, as SPIRE needs it
	hash := sha256Hex(spki)
	wantHW := fmt.Sprintf("49465800:%x:04d5", cert.AuthorityKeyId)
	// A certificate without an authorityKeyIdentifier (its issuer carried no subjectKeyIdentifier)
	// gives no hwSerialNum of the manufacturer's: the EK's hash stands in, as without a certificate.
	noSKI, issuer := *vendor, *vendor.Cert
	issuer.SubjectKeyId, noSKI.Cert = nil, &issuer
	noAKID := ekCertFrom(t, &noSKI, spki)

	tests := []struct {
		name     string
		policy   attest.EKPolicy
		bundle   []byte
		cert     []byte
		approved []string
		noCert   bool // the device is declared ek_certificate: none
		want     attest.Check
		wantHW   string
		verified bool
		version  string // VerifiedEK.TPMVersion; "" is "2.0"
	}{
		{name: "ok/hash+cert", policy: attest.EKPolicyHashCert, bundle: bundle, cert: certDER, approved: []string{hash}, wantHW: wantHW, verified: true,
			version: "2.0 level 0 revision 1.38"},
		{name: "ok/hash+cert-without-tpm-specification", policy: attest.EKPolicyHashCert, bundle: bundle, cert: ekCertFor(t, vendor, spki, ""), approved: []string{hash},
			wantHW: wantHW, verified: true},
		{name: "ok/hash+cert-specification-of-another-family", policy: attest.EKPolicyHashCert, bundle: bundle, cert: ekCertFor(t, vendor, spki, "1.2"), approved: []string{hash},
			wantHW: wantHW, verified: true},
		{name: "ok/hash+cert-no-certificate-declared-none", policy: attest.EKPolicyHashCert, bundle: bundle, approved: []string{hash}, noCert: true},
		{name: "ok/hash-no-certificate", policy: attest.EKPolicyHash, approved: []string{hash}},
		{name: "refuse/hash+cert-certificate-left-out", policy: attest.EKPolicyHashCert, bundle: bundle, approved: []string{hash}, want: attest.CheckEKCertMissing},
		{name: "refuse/hash+cert-declared-none-untrusted-certificate-sent", policy: attest.EKPolicyHashCert, bundle: bundle, cert: untrustedEKCert(t, spki), approved: []string{hash}, noCert: true, want: attest.CheckEKCertChain},
		{name: "ok/hash-uppercase-approval", policy: attest.EKPolicyHash, cert: certDER, approved: []string{strings.ToUpper(hash)}, wantHW: wantHW},
		{name: "ok/hash-ignores-issuer", policy: attest.EKPolicyHash, cert: untrustedEKCert(t, spki), approved: []string{hash}},
		{name: "ok/hash-certificate-without-authority-key-id", policy: attest.EKPolicyHash, cert: noAKID, approved: []string{hash},
			wantHW: string(sha256Of(spki))},
		{name: "refuse/not-approved", policy: attest.EKPolicyHash, cert: certDER, approved: []string{sha256Hex(nil)}, want: attest.CheckEKApproved},
		{name: "refuse/no-approvals", policy: attest.EKPolicyHash, approved: nil, want: attest.CheckEKApproved},
		{name: "refuse/untrusted-issuer", policy: attest.EKPolicyHashCert, bundle: bundle, cert: untrustedEKCert(t, spki), approved: []string{hash}, want: attest.CheckEKCertChain},
		{name: "refuse/root-only-bundle", policy: attest.EKPolicyHashCert, bundle: pki.EncodeCertificatesPEM(vendor.Above...), cert: certDER, approved: []string{hash}, want: attest.CheckEKCertChain},
		{name: "refuse/cert-for-another-key", policy: attest.EKPolicyHash, cert: ekCertFrom(t, vendor, nil), approved: []string{hash}, want: attest.CheckEKCertKey},
		{name: "refuse/cert-garbage", policy: attest.EKPolicyHash, cert: []byte{0x30, 0x03, 0x02, 0x01, 0x01}, approved: []string{hash}, want: attest.CheckEKMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: tc.policy, BundlePEM: tc.bundle, Now: func() time.Time { return testTime }})
			if err != nil {
				t.Fatal(err)
			}
			ek, err := v.Verify(spki, tc.cert, attest.EKApproval{SHA256: tc.approved, NoCertificate: tc.noCert})
			if tc.want != "" {
				r, ok := attest.AsRefusal(err)
				if !ok || r.Check != tc.want {
					t.Fatalf("err = %v, want a %s refusal", err, tc.want)
				}
				for _, h := range tc.approved { // the caller is unauthenticated: the declaration stays in NetBox
					if h != hash && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(h)) {
						t.Errorf("the refusal %q names the approved ek_sha256 %s", err, h)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ek.SHA256 != hash || ek.CertVerified != tc.verified {
				t.Errorf("VerifiedEK = {SHA256 %s, CertVerified %v}, want {%s, %v}", ek.SHA256, ek.CertVerified, hash, tc.verified)
			}
			wantHW := tc.wantHW
			if wantHW == "" && tc.cert == nil {
				wantHW = string(sha256Of(spki))
			}
			if wantHW != "" && string(ek.HWSerialNum) != wantHW {
				t.Errorf("HWSerialNum = %q, want %q", ek.HWSerialNum, wantHW)
			}
			// Only a verified certificate adds the manufacturer's specification to the "2.0"
			// the protocol proves (ok/hash-uppercase-approval carries one, unverified).
			if want := cmp.Or(tc.version, "2.0"); ek.TPMVersion() != want {
				t.Errorf("TPMVersion() = %q, want %q", ek.TPMVersion(), want)
			}
		})
	}
}

// TestEKVerifierConfig checks the configuration refusals.
func TestEKVerifierConfig(t *testing.T) {
	now := func() time.Time { return testTime }
	vendor, _, err := pki.NewCA(pki.NewCAConfig{Name: "TPM Vendor", Rand: seeded(41), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	damaged := append(pki.EncodeCertificatesPEM(vendor.Cert), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")...)
	if _, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: attest.EKPolicyHashCert, BundlePEM: damaged, Now: now}); err == nil ||
		!strings.Contains(err.Error(), "certificate 2:") {
		t.Errorf("refuse/a bundle whose second certificate is damaged: %v, want an error naming certificate 2", err)
	}
	for name, cfg := range map[string]attest.EKVerifierConfig{
		"refuse/unknown-policy":      {Policy: "cert", Now: now},
		"refuse/hash+cert-no-bundle": {Policy: attest.EKPolicyHashCert, Now: now},
		"refuse/bundle-with-a-key":   {Policy: attest.EKPolicyHashCert, BundlePEM: []byte("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"), Now: now},
		"refuse/no-clock":            {Policy: attest.EKPolicyHash},
	} {
		if _, err := attest.NewEKVerifier(cfg); err == nil {
			t.Errorf("%s: NewEKVerifier accepted the configuration", name)
		}
	}
}

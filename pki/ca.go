// Package pki holds fleetd's certificate authorities and the certificate profiles they issue:
// the LDevID (a TPM-resident signing key SPIRE's tpm_devid node attestor accepts) and the LAK
// (the attestation key boot checks are signed with), per docs/design.md §4 and the TCG "TPM 2.0 Keys for
// Device Identity and Attestation" profile.
//
// Trust assumptions: a CA's key file is as secret as the fleet (anyone holding it can mint device
// identities SPIRE accepts); issuing functions trust their inputs completely, so callers pass only
// keys and identities that attest/ verified. pki imports nothing of fleetd and no network code.
package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// CA is an issuing certificate authority: its certificate, the certificates above it, and its key.
type CA struct {
	// Cert is the issuing CA certificate.
	Cert *x509.Certificate
	// Above are the certificates above Cert, each signed by the next, ending with the root when
	// the file holds it. Roots are kept here but not sent in chains (see Chain).
	Above []*x509.Certificate
	// Signer is the issuing CA's private key.
	Signer crypto.Signer
}

// LoadCA reads a CA from a PEM certificate file (the issuing CA first, then up to the root) and a
// PEM private key file (PKCS#8, SEC 1 "EC PRIVATE KEY" or PKCS#1), as fleetd.yaml names them.
func LoadCA(certPath, keyPath string) (*CA, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA from %s and %s: %w", certPath, keyPath, err)
	}
	return ca, nil
}

// ParseCA parses a CA from PEM bytes (see LoadCA) and checks that it can issue: the first
// certificate is a CA allowed to sign certificates, the key is its key, and each certificate is
// signed by the next one.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertificatesPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("the certificate file holds no CERTIFICATE block")
	}
	signer, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: certs[0], Above: certs[1:], Signer: signer}
	if !ca.Cert.IsCA || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is not a CA allowed to sign certificates (basicConstraints CA and keyCertSign needed)", ca.Cert.Subject)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.Cert.PublicKey) {
		return nil, fmt.Errorf("the key is not the key of certificate %q", ca.Cert.Subject)
	}
	for i, c := range certs[:len(certs)-1] {
		if err := c.CheckSignatureFrom(certs[i+1]); err != nil {
			return nil, fmt.Errorf("certificate %q is not signed by the next one in the file, %q: %w", c.Subject, certs[i+1].Subject, err)
		}
	}
	return ca, nil
}

// Chain is what an issued certificate is sent with: the issuing CA and the intermediates above
// it, without a self-issued root (the verifier has the root; SPIRE's tpm_devid takes the chain
// after the leaf as intermediates).
func (ca *CA) Chain() []*x509.Certificate {
	out := []*x509.Certificate{ca.Cert}
	for _, c := range ca.Above {
		if !isSelfIssued(c) {
			out = append(out, c)
		}
	}
	return out
}

// Roots is a pool holding the CA's root: the last certificate of its file (the issuing CA itself
// when the file holds only it). Verifiers of certificates this CA issued use it.
func (ca *CA) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	if len(ca.Above) == 0 {
		p.AddCert(ca.Cert)
	} else {
		p.AddCert(ca.Above[len(ca.Above)-1])
	}
	return p
}

// isSelfIssued reports a root: ParseCA already checked each certificate's signature by the next,
// so subject and issuer are compared without checking the signature again on every issue.
func isSelfIssued(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject)
}

// ParseCertificatesPEM parses every CERTIFICATE block of b, in order. Other block types are
// refused, so a key pasted into a certificate file is noticed.
func ParseCertificatesPEM(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("parse certificates: unexpected PEM block %q", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(bytes.TrimSpace(b)) != 0 {
		return nil, errors.New("parse certificates: trailing data that is not PEM")
	}
	return out, nil
}

// ParsePrivateKeyPEM parses one PEM private key: PKCS#8, SEC 1 or PKCS#1.
func ParsePrivateKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("parse private key: no PEM block")
	}
	var key any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("parse private key: unexpected PEM block %q", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parse private key: a %T cannot sign", key)
	}
	return s, nil
}

// EncodeCertificatesPEM encodes certificates as consecutive PEM CERTIFICATE blocks.
func EncodeCertificatesPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

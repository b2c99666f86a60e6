package swtpm

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// Files swtpm_localca keeps in its state directory.
const (
	caRootCertFile    = "swtpm-localca-rootca-cert.pem"
	caIssuingCertFile = "issuercert.pem"
)

// EKCA is the local EK CA that issued the software TPMs' EK certificates: a self-signed root and
// the issuing CA it signed. A verifier needs both in its bundle, because SPIRE's tpm_devid (and
// fleetd's hash+cert policy) verify EK certificates without an intermediates pool (docs/design.md §8,
// stack.json ca.ek).
type EKCA struct {
	Root, Issuing         *x509.Certificate
	RootPath, IssuingPath string
}

// ReadEKCA reads the EK CA that Manufacture created in caDir.
func ReadEKCA(caDir string) (*EKCA, error) {
	ca := &EKCA{
		RootPath:    filepath.Join(caDir, caRootCertFile),
		IssuingPath: filepath.Join(caDir, caIssuingCertFile),
	}
	var err error
	if ca.Root, err = readPEMCert(ca.RootPath); err != nil {
		return nil, err
	}
	if ca.Issuing, err = readPEMCert(ca.IssuingPath); err != nil {
		return nil, err
	}
	return ca, nil
}

// BundlePEM returns the issuing CA and the root, PEM-encoded, as one bundle file holds them.
func (ca *EKCA) BundlePEM() []byte {
	var out []byte
	for _, c := range []*x509.Certificate{ca.Issuing, ca.Root} {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// Pool returns a pool holding both certificates, the anchors a verifier of EK certificates uses.
func (ca *EKCA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Root)
	p.AddCert(ca.Issuing)
	return p
}

func readPEMCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read EK CA certificate: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("read EK CA certificate %s: no PEM CERTIFICATE block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse EK CA certificate %s: %w", path, err)
	}
	return c, nil
}

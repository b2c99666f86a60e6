package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"
)

// devCA is an in-memory development CA: a self-signed ECDSA P-256 root and one issuing CA it
// signed. fleetd's pki.ldevid and pki.lak read such a pair as "issuing CA, then its root" plus
// the issuing CA's key. (pki/ has no exported helper for this in the committed tree; when it
// has one, this file can call it instead.)
type devCA struct {
	root, issuing *x509.Certificate
	key           *ecdsa.PrivateKey // the issuing CA's key; the root's key is discarded
}

// caLifetime is how long the development CAs are valid.
const caLifetime = 10 * 365 * 24 * time.Hour

// newDevCA makes "<name> Root CA" and "<name> CA" (path length 0 below the issuing CA).
func newDevCA(name string, rnd io.Reader, now time.Time) (*devCA, error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, fmt.Errorf("make %s CA: generate root key: %w", name, err)
	}
	root, err := signCA(rnd, now, name+" Root CA", 1, &rootKey.PublicKey, nil, rootKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, fmt.Errorf("make %s CA: generate issuing key: %w", name, err)
	}
	issuing, err := signCA(rnd, now, name+" CA", 0, &key.PublicKey, root, rootKey)
	if err != nil {
		return nil, err
	}
	return &devCA{root: root, issuing: issuing, key: key}, nil
}

// signCA signs a CA certificate for pub with parentKey; a nil parent makes it self-signed.
func signCA(rnd io.Reader, now time.Time, cn string, maxPath int, pub *ecdsa.PublicKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := randSerial(rnd)
	if err != nil {
		return nil, fmt.Errorf("make CA %q: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"fleetsim"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            maxPath,
		MaxPathLenZero:        maxPath == 0,
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rnd, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("make CA %q: sign: %w", cn, err)
	}
	return x509.ParseCertificate(der)
}

func randSerial(rnd io.Reader) (*big.Int, error) {
	n, err := rand.Int(rnd, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("draw serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// writeFiles writes the chain (issuing CA, then root) to certPath (0644) and the issuing CA's
// key as PKCS#8 to keyPath (0600).
func (ca *devCA) writeFiles(certPath, keyPath string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("encode CA key: %w", err)
	}
	chain := append(certPEM(ca.issuing), certPEM(ca.root)...)
	if err := os.WriteFile(certPath, chain, 0o644); err != nil {
		return fmt.Errorf("write CA certificates: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("write CA key: %w", err)
	}
	return nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

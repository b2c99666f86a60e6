package kubecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certLifetime is long: a test cluster's certificates must not lapse under a slow run, and the
// signer's own duration (24 h) is what a node's client certificate gets from a CSR.
const certLifetime = 48 * time.Hour

// authority is one CA of the harness: a self-signed ECDSA P-256 certificate and its key.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// newAuthority makes a CA named cn and writes its certificate and key as dir/name.crt and
// dir/name.key.
func newAuthority(dir, name, cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the %s key: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign the %s certificate: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	a := &authority{cert: cert, key: key, pem: pemBlock("CERTIFICATE", der)}
	if err := writePair(dir, name, a.pem, key); err != nil {
		return nil, err
	}
	return a, nil
}

// leaf is what issue makes: a certificate's subject, its names and what it is for.
type leaf struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool // serverAuth, else clientAuth
}

// issue signs a certificate for l with a new key and returns both in PEM.
func (a *authority) issue(l leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a key for %s: %w", l.cn, err)
	}
	now := time.Now()
	usage := x509.ExtKeyUsageClientAuth
	if l.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: l.cn, Organization: l.orgs},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames:    l.dns,
		IPAddresses: l.ips,
	}
	der, err := sign(tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign a certificate for %s: %w", l.cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// issueFiles is issue writing dir/name.crt and dir/name.key; it returns their paths.
func (a *authority) issueFiles(dir, name string, l leaf) (certPath, keyPath string, err error) {
	certPEM, keyPEM, err := a.issue(l)
	if err != nil {
		return "", "", err
	}
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, priv crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writePair writes a certificate and its key as dir/name.crt and dir/name.key.
func writePair(dir, name string, certPEM []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pemBlock("EC PRIVATE KEY", keyDER), 0o600)
}

// writeServiceAccountKey writes the key kube-apiserver signs service account tokens with, and
// its public half, which it verifies them with.
func writeServiceAccountKey(dir string) (priv, pub string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	priv, pub = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(priv, pemBlock("EC PRIVATE KEY", keyDER), 0o600); err != nil {
		return "", "", err
	}
	return priv, pub, os.WriteFile(pub, pemBlock("PUBLIC KEY", pubDER), 0o644)
}

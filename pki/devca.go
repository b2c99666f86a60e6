package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// NewCAConfig describes an in-memory CA pair for tests and the development stack (never for
// production: production CAs are made by the operator and loaded with LoadCA).
type NewCAConfig struct {
	Name     string           // e.g. "fleetd DevID": the root is "<Name> Root CA", the issuing CA "<Name> CA"
	Lifetime time.Duration    // of both certificates; 10 years when zero
	Rand     io.Reader        // serial numbers
	Now      func() time.Time // the clock
}

// NewCA makes a self-signed ECDSA P-256 root and an issuing CA it signs, and returns the issuing
// CA (with the root in Above) and the root's key. The key of the root is returned only so that a
// test can make a second issuing CA under it; the development stack discards it.
func NewCA(cfg NewCAConfig) (*CA, crypto.Signer, error) {
	if cfg.Name == "" || cfg.Rand == nil || cfg.Now == nil {
		return nil, nil, errors.New("new CA: Name, Rand and Now are needed")
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = 10 * 365 * 24 * time.Hour
	}
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), cfg.Rand)
	if err != nil {
		return nil, nil, fmt.Errorf("new CA: generate root key: %w", err)
	}
	root, err := newCACert(cfg, cfg.Name+" Root CA", rootKey, nil, rootKey, 1)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), cfg.Rand)
	if err != nil {
		return nil, nil, fmt.Errorf("new CA: generate issuing key: %w", err)
	}
	cert, err := newCACert(cfg, cfg.Name+" CA", key, root, rootKey, 0)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, Above: []*x509.Certificate{root}, Signer: key}, rootKey, nil
}

// newCACert signs a CA certificate for key's public key with parentKey (self-signed when parent
// is nil); maxPath limits the CAs that may follow below it.
func newCACert(cfg NewCAConfig, cn string, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey crypto.Signer, maxPath int) (*x509.Certificate, error) {
	serial, err := newSerial(cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", cn, err)
	}
	now := cfg.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"fleetd development"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(cfg.Lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            maxPath,
		MaxPathLenZero:        maxPath == 0,
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(cfg.Rand, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: sign: %w", cn, err)
	}
	return x509.ParseCertificate(der)
}

// CAFiles are the files WriteFiles wrote.
type CAFiles struct {
	Cert string // the issuing CA then its root: what fleetd.yaml's pki.*.cert names and stack.json's ca.* holds
	Key  string // the issuing CA's key (PKCS#8, mode 0600)
	Root string // the root alone: what a verifier's trust bundle holds
}

// WriteFiles writes the CA as "<base>.pem" (issuing CA then the certificates above it),
// "<base>.key" and "<base>-root.pem" into dir.
func (ca *CA) WriteFiles(dir, base string) (CAFiles, error) {
	f := CAFiles{
		Cert: filepath.Join(dir, base+".pem"),
		Key:  filepath.Join(dir, base+".key"),
		Root: filepath.Join(dir, base+"-root.pem"),
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Signer)
	if err != nil {
		return CAFiles{}, fmt.Errorf("write CA files: encode key: %w", err)
	}
	root := ca.Cert
	if len(ca.Above) > 0 {
		root = ca.Above[len(ca.Above)-1]
	}
	writes := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.Cert, EncodeCertificatesPEM(append([]*x509.Certificate{ca.Cert}, ca.Above...)...), 0o644},
		{f.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{f.Root, EncodeCertificatesPEM(root), 0o644},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			return CAFiles{}, fmt.Errorf("write CA files: %w", err)
		}
	}
	return f, nil
}

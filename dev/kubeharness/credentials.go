package kubeharness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files in the data directory. The serving certificate is its own CA (the kubeconfig trusts it
// directly); the token authenticates the privileged loopback user.
const (
	certFile  = "certs/apiserver.crt"
	keyFile   = "certs/apiserver.key"
	tokenFile = "token"
)

// certLifetime is long because the certificate is reused across restarts on the same Dir.
const certLifetime = 10 * 365 * 24 * time.Hour

// loadCredentials reuses the certificate and token in Dir when they are there and usable, and
// creates them otherwise. Keeping them lets a client built before a restart connect after it.
func (s *Server) loadCredentials() error {
	certPath, keyPath := filepath.Join(s.dir, certFile), filepath.Join(s.dir, keyFile)
	if !usableCert(certPath, keyPath) {
		if err := writeServingCert(certPath, keyPath); err != nil {
			return err
		}
	}
	ca, err := os.ReadFile(certPath)
	if err != nil {
		return fmt.Errorf("read serving certificate: %w", err)
	}
	s.caPEM = ca
	tokenPath := filepath.Join(s.dir, tokenFile)
	tok, err := os.ReadFile(tokenPath)
	if err == nil && len(strings.TrimSpace(string(tok))) >= 32 {
		s.token = strings.TrimSpace(string(tok))
		return nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("draw loopback token: %w", err)
	}
	s.token = hex.EncodeToString(b)
	if err := os.WriteFile(tokenPath, []byte(s.token+"\n"), 0o600); err != nil {
		return fmt.Errorf("write loopback token: %w", err)
	}
	return nil
}

// usableCert reports whether the pair loads and the certificate is valid for another day.
func usableCert(certPath, keyPath string) bool {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return false
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	return err == nil && time.Until(c.NotAfter) > 24*time.Hour
}

// writeServingCert writes a self-signed ECDSA P-256 certificate (CA:true) for 127.0.0.1 and
// localhost. ECDSA spares the apiserver's own fallback, generating two RSA-2048 keys (0.1–0.2 s).
func writeServingCert(certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return fmt.Errorf("draw certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubeharness"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode serving key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return fmt.Errorf("create certificate dir: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("write serving key: %w", err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write serving certificate: %w", err)
	}
	return nil
}

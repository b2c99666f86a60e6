package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// fleetd's TLS in the stack (docs/design.md §6, docs/security.md "Transport"): fleetd serves every route
// over HTTPS on listen.https with a server certificate from the stack's own CA, and plain HTTP on
// listen.http, where the node routes answer 403 tls_required. Agents, nodes and the stack's own
// clients trust the CA (ca/fleetd.pem, stack.json ca.fleetd; the agents' FLEETD_CA_FILE);
// NetBox's webhooks, the operator routes and the metrics may use either listener.

// tlsLifetime is how long the stack's server certificate and its CA are valid: longer than any
// stack runs (every start makes new ones).
const tlsLifetime = 30 * 24 * time.Hour

// writeFleetdTLS makes the stack's fleetd CA (ECDSA P-256, self-signed) and fleetd's server
// certificate for 127.0.0.1 and localhost, and writes the CA to caPath, the certificate to
// certPath and its key to keyPath (mode 0600).
func writeFleetdTLS(rnd io.Reader, clock fleet.Clock, caPath, certPath, keyPath string) error {
	now := clock.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return fmt.Errorf("make the fleetd TLS CA: %w", err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleetsim fleetd TLS CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(tlsLifetime), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rnd, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("make the fleetd TLS CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return fmt.Errorf("make fleetd's TLS key: %w", err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fleetd (fleetsim)"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(tlsLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("make fleetd's TLS certificate: %w", err)
	}
	leafDER, err := x509.CreateCertificate(rnd, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("make fleetd's TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode fleetd's TLS key: %w", err)
	}
	if err := os.WriteFile(caPath, pemBlock("CERTIFICATE", caDER), 0o644); err != nil {
		return fmt.Errorf("write the fleetd TLS CA: %w", err)
	}
	if err := os.WriteFile(certPath, pemBlock("CERTIFICATE", leafDER), 0o644); err != nil {
		return fmt.Errorf("write fleetd's TLS certificate: %w", err)
	}
	return writeSecret(keyPath, pemBlock("PRIVATE KEY", keyDER))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// FleetdTLS is the TLS configuration of a client of the stack's fleetd: it trusts the stack's
// fleetd CA (stack.json ca.fleetd) only.
func FleetdTLS(info Info) (*tls.Config, error) {
	b, err := os.ReadFile(info.CA.Fleetd)
	if err != nil {
		return nil, fmt.Errorf("read the stack's fleetd TLS CA (stack.json ca.fleetd): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the stack's fleetd TLS CA %s holds no PEM certificate", info.CA.Fleetd)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// FleetdClient is an HTTP client for fleetd's URLs (https with the stack's CA, or plain http),
// with the given timeout.
func FleetdClient(info Info, timeout time.Duration) (*http.Client, error) {
	cfg, err := FleetdTLS(info)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

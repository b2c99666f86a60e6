package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a CA made in memory for the webhook's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf's PEM certificate and key: for serving (with the DNS names) or for client auth.
func (ca *testCA) issue(t *testing.T, usage x509.ExtKeyUsage, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestParseWebhookClient: the API server's side of the authorization webhook (url, server_ca,
// apiserver_cert, apiserver_key) is accepted when all four agree with the listener's certificate
// and client CA, and refused, naming the key and what to do, when the API server's handshake with
// the webhook would fail (which it would do silently: no opinion from fleetd, nothing denied).
func TestParseWebhookClient(t *testing.T) {
	dir, good := validConfig(t)
	serving, clients, other := newTestCA(t, "webhook-ca"), newTestCA(t, "apiserver-client-ca"), newTestCA(t, "other-ca")
	servingCert, servingKey := serving.issue(t, x509.ExtKeyUsageServerAuth, "spore.lan")
	clientCert, clientKey := clients.issue(t, x509.ExtKeyUsageClientAuth)
	otherClientCert, otherClientKey := other.issue(t, x509.ExtKeyUsageClientAuth)
	_, strayKey := clients.issue(t, x509.ExtKeyUsageClientAuth)
	for name, b := range map[string][]byte{"authz.crt": servingCert, "authz.key": servingKey, "apiserver-client-ca.pem": clients.pem,
		"webhook-ca.pem": serving.pem, "other-ca.pem": other.pem, "apiserver.crt": clientCert, "apiserver.key": clientKey,
		"other-client.crt": otherClientCert, "other-client.key": otherClientKey, "stray.key": strayKey, "not-pem.pem": []byte("x\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const listener = `listen: ":9443", cert: authz.crt, key: authz.key, client_ca: apiserver-client-ca.pem`
	const client = `url: "https://spore.lan:9443/v1/cluster/authorize", server_ca: webhook-ca.pem, apiserver_cert: apiserver.crt, apiserver_key: apiserver.key`
	with := func(keys string) string { return good + "cluster:\n  authorization: {" + keys + "}\n" }
	for _, r := range []struct {
		name string
		cfg  string
		want []string
	}{
		{"ok/the webhook rendered into the Talos control plane configs", with(listener + ", " + client), nil},
		{"ok/the webhook served, the API server set up otherwise", with(listener), nil},
		{"refuse/url alone", with(listener + `, url: "https://spore.lan:9443/v1/cluster/authorize"`), []string{
			"cluster.authorization.server_ca: is not set while other keys of the API server's side are",
			"cluster.authorization.apiserver_cert: is not set",
			"cluster.authorization.apiserver_key: is not set",
		}},
		{"refuse/the API server's side without the listener", with(client), []string{
			"cluster.authorization.listen: is not set while other cluster.authorization keys are",
		}},
		{"refuse/url over http", with(listener + ", " + strings.Replace(client, "https://", "http://", 1)), []string{
			`cluster.authorization.url: "http://spore.lan:9443/v1/cluster/authorize" is not an https URL`,
		}},
		{"refuse/url of another path", with(listener + ", " + strings.Replace(client, "/v1/cluster/authorize", "/authorize", 1)), []string{
			`cluster.authorization.url: "https://spore.lan:9443/authorize" has the path "/authorize": give the webhook's path, /v1/cluster/authorize`,
		}},
		{"refuse/url with a host the certificate does not name", with(listener + ", " + strings.Replace(client, "spore.lan", "fleetd.lan", 1)), []string{
			"cluster.authorization.url: x509: certificate is valid for spore.lan, not fleetd.lan: give a URL whose host is one of the certificate's names",
		}},
		{"refuse/server_ca that does not sign the serving certificate", with(listener + ", " + strings.Replace(client, "webhook-ca.pem", "other-ca.pem", 1)), []string{
			"cluster.authorization.server_ca: does not verify cluster.authorization.cert",
		}},
		{"refuse/server_ca with no certificate", with(listener + ", " + strings.Replace(client, "webhook-ca.pem", "not-pem.pem", 1)), []string{
			"not-pem.pem holds no PEM certificate: give the CA that signs cluster.authorization.cert",
		}},
		{"refuse/server_ca unreadable", with(listener + ", " + strings.Replace(client, "webhook-ca.pem", "missing.pem", 1)), []string{
			"cluster.authorization.server_ca: cannot read",
		}},
		{"refuse/apiserver_key of another certificate", with(listener + ", " + strings.Replace(client, "apiserver.key", "stray.key", 1)), []string{
			"cluster.authorization.apiserver_key: with cluster.authorization.apiserver_cert: tls: private key does not match public key",
		}},
		{"refuse/apiserver_cert of another CA than client_ca", with(listener + ", " + strings.NewReplacer("apiserver.crt", "other-client.crt", "apiserver.key", "other-client.key").Replace(client)), []string{
			"cluster.authorization.apiserver_cert: is not a client certificate of cluster.authorization.client_ca",
		}},
		{"refuse/apiserver_cert a serving certificate", with(listener + ", " + strings.NewReplacer("apiserver.crt", "authz.crt", "apiserver.key", "authz.key").Replace(client)), []string{
			"cluster.authorization.apiserver_cert: is not a client certificate of cluster.authorization.client_ca",
		}},
	} {
		t.Run(r.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(r.cfg), dir)
			if r.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got := c.Cluster.Authorization.Rendered(); got != strings.Contains(r.cfg, "apiserver_cert:") {
					t.Errorf("Rendered() = %v", got)
				}
				return
			}
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			for _, w := range r.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			checkProblemsSayWhatToDo(t, err)
		})
	}
}

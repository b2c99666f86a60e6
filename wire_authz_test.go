package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
)

// pemCA is a CA that writes what it issues as PEM files.
type pemCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newPEMCA(t *testing.T) pemCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return pemCA{cert: cert, key: key}
}

func (ca pemCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

func (ca pemCA) issue(t *testing.T, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fleetd serve's authorization listener (cluster.authorization): TLS with its certificate, only
// clients of client_ca, answering a SubjectAccessReview from the service's NodeAccess; a
// client_ca file with no certificate, or a key that is not the certificate's, stops fleetd
// naming the key.
func TestAuthorizationListener(t *testing.T) {
	dir := t.TempDir()
	serving, clients := newPEMCA(t), newPEMCA(t)
	cert, key := serving.issue(t, true)
	_, otherKey := serving.issue(t, true)
	az := config.ClusterAuthorization{Listen: "127.0.0.1:0", Cert: writeFile(t, dir, "authz.crt", cert), Key: writeFile(t, dir, "authz.key", key),
		ClientCA: writeFile(t, dir, "client-ca.pem", clients.pem())}
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore", ServiceUser: fleettest.ServiceUser}, fleet.Deps{Seal: fleettest.SealKeys(),
		NetBox: fleettest.NewNetBox(), Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: fleet.SystemClock{}, Random: rand.Reader})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(*config.ClusterAuthorization)
		want string
	}{
		"refuse/client-ca-without-a-certificate": {func(a *config.ClusterAuthorization) { a.ClientCA = writeFile(t, dir, "empty.pem", []byte("not PEM\n")) },
			"cluster.authorization.client_ca: " + filepath.Join(dir, "empty.pem") + " holds no PEM certificate"},
		"refuse/a-key-of-another-certificate": {func(a *config.ClusterAuthorization) { a.Key = writeFile(t, dir, "other.key", otherKey) },
			"cluster.authorization.cert, cluster.authorization.key:"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := az
			tc.edit(&bad)
			a := &app{cfg: &config.Config{Cluster: config.Cluster{Authorization: bad}}, log: zerolog.Nop(), service: svc}
			if err := a.authorizationListener(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if len(a.servers) != 0 {
				t.Errorf("a listener was added after a refusal")
			}
		})
	}
	a := &app{cfg: &config.Config{}, log: zerolog.Nop(), service: svc}
	if err := a.authorizationListener(context.Background()); err != nil || len(a.servers) != 0 {
		t.Fatalf("without cluster.authorization.listen: %v, %d listeners; want none", err, len(a.servers))
	}
	a.cfg.Cluster.Authorization = az
	if err := a.authorizationListener(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(a.servers) != 1 || a.servers[0].key != "cluster.authorization.listen" || !a.servers[0].tls {
		t.Fatalf("listeners %+v, want one TLS listener for cluster.authorization.listen", a.servers)
	}
	srv := a.servers[0].srv
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(serving.cert)
	post := func(certs []tls.Certificate) (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}}}
		body := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:node:n1","groups":["system:nodes"]}}`
		return c.Post("https://"+ln.Addr().String()+handlers.PathAuthorize, "application/json", bytes.NewReader([]byte(body)))
	}
	if resp, err := post(nil); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s, want the handshake refused", resp.Status)
	}
	clientCert, clientKey := clients.issue(t, false)
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := post([]tls.Certificate{pair})
	if err != nil {
		t.Fatalf("the API server's client certificate: %v", err)
	}
	defer resp.Body.Close()
	var answer struct {
		Kind   string `json:"kind"`
		Status struct {
			Allowed, Denied bool
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK || answer.Kind != "SubjectAccessReview" {
		t.Fatalf("answer %s %+v: %v", resp.Status, answer, err)
	}
	if answer.Status.Allowed || answer.Status.Denied {
		t.Errorf("before any listing the answer is %+v, want no opinion", answer.Status)
	}
}

// The API server's side of the webhook reaches the renderer as the files say, and only when its
// keys are set; the URL's path config checks is the route's.
func TestAuthzWebhookForTheRenderer(t *testing.T) {
	if config.AuthorizePath != handlers.PathAuthorize {
		t.Fatalf("config checks cluster.authorization.url against %q, the route is %q", config.AuthorizePath, handlers.PathAuthorize)
	}
	dir := t.TempDir()
	ca := newPEMCA(t)
	cert, key := ca.issue(t, false)
	cfg := &config.Config{Cluster: config.Cluster{Authorization: config.ClusterAuthorization{URL: "https://spore.lan:9443" + handlers.PathAuthorize,
		ServerCA: writeFile(t, dir, "ca.pem", ca.pem()), APIServerCert: writeFile(t, dir, "c.crt", cert), APIServerKey: writeFile(t, dir, "c.key", key)}}}
	w, err := authzWebhook(cfg)
	if err != nil || w == nil || w.URL != cfg.Cluster.Authorization.URL || !bytes.Equal(w.ServerCA, ca.pem()) || !bytes.Equal(w.ClientCert, cert) || !bytes.Equal(w.ClientKey, key) {
		t.Fatalf("authzWebhook: %+v, %v", w, err)
	}
	if w, err := authzWebhook(&config.Config{}); w != nil || err != nil {
		t.Fatalf("without the keys: %+v, %v, want nothing", w, err)
	}
	cfg.Cluster.Authorization.APIServerKey = filepath.Join(dir, "gone.key")
	if _, err := authzWebhook(cfg); err == nil || !strings.Contains(err.Error(), "cluster.authorization.apiserver_key") {
		t.Fatalf("an unreadable key: %v, want it named", err)
	}
}

package handlers_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers"
)

// testCA is a CA for the listener's tests: it signs a serving or a client certificate.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, cn string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

func (ca testCA) issue(t *testing.T, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// decider answers with a fixed decision and records what it was asked.
type decider struct {
	mu     sync.Mutex
	answer fleet.NodeDecision
	asked  []fleet.NodeRequest
}

func (d *decider) Decide(r fleet.NodeRequest) fleet.NodeDecision {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, r)
	return d.answer
}

func sarBody(user string, groups ...string) []byte {
	b, _ := json.Marshal(map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{"user": user, "groups": groups,
			"resourceAttributes": map[string]any{"verb": "get", "resource": "nodes", "name": "n9", "fieldSelector": map[string]any{"rawSelector": "x=y"}},
			"uid":                "u-1"}})
	return b
}

// The webhook's listener takes only clients with a certificate of its client CA (the API
// server's): no certificate, or one of another CA (a node's, of the cluster CA), fails the
// handshake; the route itself refuses a request that came without a verified certificate.
func TestAuthorizeNeedsTheAPIServersCertificate(t *testing.T) {
	serving, clients, cluster := newTestCA(t, "webhook serving"), newTestCA(t, "webhook clients"), newTestCA(t, "cluster")
	d := &decider{answer: fleet.NodeDecision{Result: fleet.NodeNoOpinion}}
	h, err := handlers.NewAuthorization(handlers.AuthorizationDeps{Access: d, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = handlers.AuthorizationTLS(serving.issue(t, "fleetd", true), clients.pool())
	srv.StartTLS()
	defer srv.Close()
	post := func(cert *tls.Certificate) (*http.Response, error) {
		cfg := &tls.Config{RootCAs: serving.pool(), MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		return c.Post(srv.URL+handlers.PathAuthorize, "application/json", bytes.NewReader(sarBody("system:node:n9", "system:nodes")))
	}
	apiserver := clients.issue(t, "kube-apiserver", false)
	resp, err := post(&apiserver)
	if err != nil {
		t.Fatalf("the API server's certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the API server's certificate: %s", resp.Status)
	}
	node := cluster.issue(t, "system:node:n9", false)
	for name, cert := range map[string]*tls.Certificate{"refuse/no-certificate": nil, "refuse/another-ca": &node} {
		t.Run(name, func(t *testing.T) {
			if resp, err := post(cert); err == nil {
				resp.Body.Close()
				t.Fatalf("answered %s, want the TLS handshake refused", resp.Status)
			}
		})
	}
	if len(d.asked) != 1 {
		t.Errorf("the decision was asked %d times, want once (the refused clients reach nothing)", len(d.asked))
	}
	// Served without TLS (a wiring mistake), the route answers nobody.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, handlers.PathAuthorize, bytes.NewReader(sarBody("system:node:n9", "system:nodes"))))
	if rec.Code != http.StatusForbidden || len(d.asked) != 1 {
		t.Errorf("a request without a client certificate: %d (asked %d), want 403 and no decision", rec.Code, len(d.asked))
	}
}

// post sends body to the handler as a client with a verified certificate would.
func post(t *testing.T, h http.Handler, method string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, handlers.PathAuthorize, bytes.NewReader(body))
	ca := newTestCA(t, "clients")
	c := ca.issue(t, "kube-apiserver", false)
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf, ca.cert}}}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The answer is a SubjectAccessReview: denied with fleetd's reason, or neither allowed nor denied
// (no opinion), never allowed; what fleetd cannot read is refused 400 or 413 (the API server's
// failure policy applies), never 5xx, which it would retry.
func TestAuthorizeAnswers(t *testing.T) {
	d := &decider{}
	var logs bytes.Buffer
	h, err := handlers.NewAuthorization(handlers.AuthorizationDeps{Access: d, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	decode := func(t *testing.T, rec *httptest.ResponseRecorder) api.SubjectAccessReview {
		t.Helper()
		var sar api.SubjectAccessReview
		if !strings.Contains(rec.Body.String(), `"allowed": false`) {
			t.Errorf("the answer does not say allowed false (a member the API server requires): %s", rec.Body)
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &sar); err != nil {
			t.Fatal(err)
		}
		if sar.APIVersion != "authorization.k8s.io/v1" || sar.Kind != "SubjectAccessReview" {
			t.Errorf("answer is %s %s", sar.APIVersion, sar.Kind)
		}
		return sar
	}
	t.Run("ok/no-opinion", func(t *testing.T) {
		d.answer = fleet.NodeDecision{Result: fleet.NodeNoOpinion, Node: "n9"}
		sar := decode(t, post(t, h, http.MethodPost, sarBody("system:node:n9", "system:nodes", "system:authenticated")))
		if sar.Status.Allowed || sar.Status.Denied {
			t.Errorf("no opinion answered %+v, want neither allowed nor denied", sar.Status)
		}
		got := d.asked[len(d.asked)-1]
		if got.User != "system:node:n9" || strings.Join(got.Groups, ",") != "system:nodes,system:authenticated" || got.Verb != "get" || got.Resource != "nodes" || got.Name != "n9" {
			t.Errorf("the decision was asked %+v", got)
		}
	})
	t.Run("refuse/denied", func(t *testing.T) {
		d.answer = fleet.NodeDecision{Deny: true, Result: fleet.NodeDenied, Node: "n9", Devices: []string{"n9"},
			Refusal: fleet.NodeRefusal{Code: fleet.NodeRefusedLeaving, Reason: "device n9 is on wipe request wipe-x"}}
		logs.Reset()
		sar := decode(t, post(t, h, http.MethodPost, sarBody("system:node:n9", "system:nodes")))
		if sar.Status.Allowed || !sar.Status.Denied || sar.Status.Reason != "fleetd: device n9 is on wipe request wipe-x" {
			t.Errorf("denial answered %+v", sar.Status)
		}
		if line := logs.String(); !strings.Contains(line, `"outcome":"denied"`) || !strings.Contains(line, `"check":"wipe-or-retire"`) || strings.Count(line, `"message":"decision"`) != 1 || !strings.Contains(line, `"request_id"`) {
			t.Errorf("want one decision line naming the outcome and the check, got %q", line)
		}
	})
	t.Run("ok/braked-answers-no-opinion", func(t *testing.T) {
		d.answer = fleet.NodeDecision{Result: fleet.NodeBraked, Refusal: fleet.NodeRefusal{Code: fleet.NodeRefusedBootFailed, Reason: "x"}}
		if sar := decode(t, post(t, h, http.MethodPost, sarBody("system:node:n9", "system:nodes"))); sar.Status.Allowed || sar.Status.Denied {
			t.Errorf("braked answered %+v, want no opinion", sar.Status)
		}
	})
	asked := len(d.asked)
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		status int
	}{
		{"refuse/not-json", http.MethodPost, []byte("{"), http.StatusBadRequest},
		{"refuse/v1beta1", http.MethodPost, bytes.Replace(sarBody("system:node:n9", "system:nodes"), []byte("authorization.k8s.io/v1"), []byte("authorization.k8s.io/v1beta1"), 1), http.StatusBadRequest},
		{"refuse/another-kind", http.MethodPost, []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{}}`), http.StatusBadRequest},
		{"refuse/too-large", http.MethodPost, append([]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"`), append(bytes.Repeat([]byte("a"), 70<<10), []byte(`"}}`)...)...), http.StatusRequestEntityTooLarge},
		{"refuse/get", http.MethodGet, nil, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(t, h, tc.method, tc.body)
			if rec.Code != tc.status {
				t.Errorf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			body, _ := io.ReadAll(rec.Body)
			if tc.method == http.MethodPost && !strings.Contains(string(body), `"message"`) {
				t.Errorf("a refusal without a message: %s", body)
			}
		})
	}
	if len(d.asked) != asked {
		t.Errorf("a refused request reached the decision (%d, want %d)", len(d.asked), asked)
	}
}

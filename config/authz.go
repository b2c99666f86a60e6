package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"os"
)

// validateWebhookClient checks the API server's side of the authorization webhook, which fleetd
// renders into the Talos control plane configs of joining classes: all four keys or none, the URL
// the webhook's, and, with the files read, the names and CAs agreeing, so that the API server's
// handshake with the webhook succeeds. A failing handshake is silent: the API server has no
// opinion from fleetd (failurePolicy NoOpinion) and nothing is denied.
func (c *Config) validateWebhookClient(p *problems) {
	a := c.Cluster.Authorization
	const key = "cluster.authorization"
	keys := []struct{ name, v string }{{"url", a.URL}, {"server_ca", a.ServerCA}, {"apiserver_cert", a.APIServerCert}, {"apiserver_key", a.APIServerKey}}
	set := 0
	for _, k := range keys {
		if k.v != "" {
			set++
		}
	}
	if set == 0 {
		return
	}
	if set < len(keys) {
		for _, k := range keys {
			if k.v == "" {
				p.bad(key+"."+k.name, "is not set while other keys of the API server's side are: set all four (url, server_ca, apiserver_cert, apiserver_key) to render it into the Talos control plane configs, or none")
			}
		}
		return
	}
	host, urlOK := webhookURLHost(p, a.URL)
	before := len(p.errs)
	p.file(key+".server_ca", a.ServerCA)
	p.file(key+".apiserver_cert", a.APIServerCert)
	p.file(key+".apiserver_key", a.APIServerKey)
	if c.skipFiles || len(p.errs) > before {
		return
	}
	serverCAs, ok := c.certPool(p, key+".server_ca", a.ServerCA, "the CA that signs cluster.authorization.cert")
	if ok {
		c.checkServing(p, serverCAs, host, urlOK)
	}
	c.checkAPIServerClient(p)
}

// webhookURLHost checks cluster.authorization.url and returns its host.
func webhookURLHost(p *problems, raw string) (string, bool) {
	const key = "cluster.authorization.url"
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		p.bad(key, "%q is not an https URL with a host and nothing else: give https://NAME:PORT%s, NAME a name of cluster.authorization.cert the API server resolves", raw, AuthorizePath)
		return "", false
	}
	if u.Path != AuthorizePath {
		p.bad(key, "%q has the path %q: give the webhook's path, %s", raw, u.Path, AuthorizePath)
		return u.Hostname(), false
	}
	return u.Hostname(), true
}

// certPool reads the PEM certificates of a file into a pool; none is a problem of key.
func (c *Config) certPool(p *problems, key, path, what string) (*x509.CertPool, bool) {
	certs, err := readCerts(c.Path(path))
	switch {
	case err != nil:
		p.bad(key, "cannot read the certificates of %s: %v: give %s, PEM", c.Path(path), err, what)
		return nil, false
	case len(certs) == 0:
		p.bad(key, "%s holds no PEM certificate: give %s", c.Path(path), what)
		return nil, false
	}
	pool := x509.NewCertPool()
	for _, crt := range certs {
		pool.AddCert(crt)
	}
	return pool, true
}

// checkServing: cluster.authorization.cert verifies under server_ca for serving, and has the
// URL's host among its names.
func (c *Config) checkServing(p *problems, roots *x509.CertPool, host string, urlOK bool) {
	a := c.Cluster.Authorization
	chain, err := readCerts(c.Path(a.Cert))
	if err != nil || len(chain) == 0 {
		return // the listener's own check (wire) names it
	}
	leaf, inter := chain[0], x509.NewCertPool()
	for _, crt := range chain[1:] {
		inter.AddCert(crt)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		p.bad("cluster.authorization.server_ca", "does not verify cluster.authorization.cert (%v): give the CA that signs the webhook's serving certificate", err)
		return
	}
	if err := leaf.VerifyHostname(host); urlOK && err != nil {
		p.bad("cluster.authorization.url", "%v: give a URL whose host is one of the certificate's names, or a certificate with that name (the API server would fail its handshake and have no opinion from fleetd)", err)
	}
}

// checkAPIServerClient: apiserver_key is apiserver_cert's, and apiserver_cert is a client
// certificate of client_ca (the only CA the webhook's listener takes).
func (c *Config) checkAPIServerClient(p *problems) {
	a := c.Cluster.Authorization
	const key = "cluster.authorization"
	certPEM, err1 := os.ReadFile(c.Path(a.APIServerCert))
	keyPEM, err2 := os.ReadFile(c.Path(a.APIServerKey))
	if err := errors.Join(err1, err2); err != nil {
		return // p.file named it
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		p.bad(key+".apiserver_key", "with cluster.authorization.apiserver_cert: %v: give the client certificate and its own key, both PEM", err)
		return
	}
	clientCAs, ok := c.certPool(p, key+".client_ca", a.ClientCA, "the CA of the API server's webhook client certificate")
	if !ok {
		return
	}
	chain, _ := readCerts(c.Path(a.APIServerCert)) // X509KeyPair parsed it
	inter := x509.NewCertPool()
	for _, crt := range chain[1:] {
		inter.AddCert(crt)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: clientCAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		p.bad(key+".apiserver_cert", "is not a client certificate of cluster.authorization.client_ca (%v): give one that CA issued for client auth (the webhook's listener refuses any other)", err)
	}
}

// readCerts reads the PEM certificates of a file, in order.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		crt, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return out, err
		}
		out = append(out, crt)
	}
}

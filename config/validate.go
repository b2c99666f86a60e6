package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// validate checks the whole config and returns every problem, one per line, each naming the key.
func (c *Config) validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	need := func(key, v string) bool {
		if v == "" {
			bad(key, "is required")
			return false
		}
		return true
	}
	file := func(key, p string) {
		if need(key, p) && !c.skipFiles {
			if _, err := os.Stat(c.Path(p)); err != nil {
				bad(key, "cannot read %s: %v", c.Path(p), errors.Unwrap(err))
			}
		}
	}
	positive := func(key string, d Duration, min time.Duration) {
		if d.D() < min {
			bad(key, "%s is shorter than %s", d.D(), min)
		}
	}

	if err := hostPort(c.Listen.HTTP); err != nil {
		bad("listen.http", "%q is not host:port", c.Listen.HTTP)
	}
	if need("public_url", c.PublicURL) {
		if err := httpURL(c.PublicURL); err != nil {
			bad("public_url", "%v", err)
		}
	}
	switch {
	case c.TLS.Cert == "" && c.TLS.Key == "" && !c.TLS.PlaintextForDevelopment:
		bad("tls.cert", "is not set: fleetd serves the node routes (enrollment, configurations, boot checks) over TLS only; "+
			"set tls.cert, tls.key and listen.https (a development stack on one host may set tls.plaintext_for_development: true instead)")
	case c.TLS.Cert != "" && c.TLS.PlaintextForDevelopment:
		bad("tls.plaintext_for_development", "is true while tls.cert is set: choose one (a fleet on a lab network needs TLS)")
	}
	if c.TLS.Cert != "" || c.TLS.Key != "" || c.Listen.HTTPS != "" {
		file("tls.cert", c.TLS.Cert)
		file("tls.key", c.TLS.Key)
		if err := hostPort(c.Listen.HTTPS); err != nil {
			bad("listen.https", "%q is not host:port (needed with tls)", c.Listen.HTTPS)
		}
		if !strings.HasPrefix(c.PublicURL, "https://") {
			bad("public_url", "%q must be https:// when tls is set: agents and nodes reach the node routes over TLS only", c.PublicURL)
		}
	}
	if c.Limits.NodeRequestsPerMinute < 0 || c.Limits.NodeBurst < 0 {
		bad("limits", "node_requests_per_minute and node_burst must not be negative")
	}
	if need("netbox.url", c.NetBox.URL) {
		if err := httpURL(c.NetBox.URL); err != nil {
			bad("netbox.url", "%v", err)
		}
	}
	file("netbox.token_file", c.NetBox.TokenFile)
	file("netbox.webhook_secret_file", c.NetBox.WebhookSecretFile)
	if c.NetBox.Retries < 0 || c.NetBox.Retries > 10 {
		bad("netbox.retries", "%d is outside 0..10", c.NetBox.Retries)
	}
	positive("netbox.timeout", c.NetBox.Timeout, time.Second)
	if c.Kubernetes.Kubeconfig != "" {
		file("kubernetes.kubeconfig", c.Kubernetes.Kubeconfig)
	}
	file("classes_file", c.ClassesFile)
	if c.Webhooks != "" {
		file("webhooks_file", c.Webhooks)
	}

	switch c.Attestation.EKPolicy {
	case "hash":
	case "hash+cert":
		file("attestation.ek_ca_bundle", c.Attestation.EKCABundle)
	default:
		bad("attestation.ek_policy", "%q is unknown: use \"hash\" or \"hash+cert\"", c.Attestation.EKPolicy)
	}
	file("attestation.token_key_file", c.Attestation.TokenKeyFile)
	file("attestation.boot_policy_file", c.Attestation.BootPolicyFile)
	positive("attestation.token_lifetime", c.Attestation.TokenLifetime, 10*time.Second)
	for key, ca := range map[string]CA{"pki.ldevid": c.PKI.LDevID, "pki.lak": c.PKI.LAK} {
		file(key+".cert", ca.Cert)
		file(key+".key", ca.Key)
		positive(key+".lifetime", ca.Lifetime, time.Minute)
		if ca.RenewAfter.D() <= 0 || ca.RenewAfter.D() >= ca.Lifetime.D() {
			bad(key+".renew_after", "%s is not within the lifetime %s: a certificate must be renewed before it expires", ca.RenewAfter.D(), ca.Lifetime.D())
		}
	}
	positive("config_delivery.pending_ttl", c.Delivery.PendingTTL, time.Minute)

	file("talos.secrets_file", c.Talos.SecretsFile)
	need("talos.cluster_name", c.Talos.ClusterName)
	if need("talos.endpoint", c.Talos.Endpoint) {
		if err := httpURL(c.Talos.Endpoint); err != nil {
			bad("talos.endpoint", "%v", err)
		}
	}
	if c.Seed.Gateway != "" {
		if _, err := netip.ParseAddr(c.Seed.Gateway); err != nil {
			bad("seed.gateway", "%q is not an IP address", c.Seed.Gateway)
		}
	}
	for i, s := range c.Seed.DNS {
		if _, err := netip.ParseAddr(s); err != nil {
			bad(fmt.Sprintf("seed.dns[%d]", i), "%q is not an IP address", s)
		}
	}
	if c.Kea.Subnet != "" {
		if p, err := netip.ParsePrefix(c.Kea.Subnet); err != nil || !p.Addr().Is4() {
			bad("kea.subnet", "%q is not an IPv4 prefix such as 10.0.0.0/24", c.Kea.Subnet)
		}
	}
	if !filepath.IsAbs(c.Kea.ReservationsFile) {
		bad("kea.reservations_file", "%q is not an absolute path: Kea's include names the same file, so give its absolute path", c.Kea.ReservationsFile)
	}
	if c.Kea.ControlSocket != "" && !filepath.IsAbs(c.Kea.ControlSocket) {
		bad("kea.control_socket", "%q is not an absolute path: give the socket-name of Kea's control-socket", c.Kea.ControlSocket)
	}
	file("operator.token_file", c.Operator.TokenFile)
	positive("reconcile.interval", c.Reconcile.Interval, 5*time.Second)
	positive("boot_check.missing_after", c.BootCheck.MissingAfter, time.Minute)
	positive("boot_check.nonce_lifetime", c.BootCheck.NonceLifetime, 10*time.Second)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is unknown: use debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		bad("log.format", "%q is unknown: use json or console", c.Log.Format)
	}
	return errors.Join(errs...)
}

package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// validate checks the whole config and returns every problem, one per line, each naming the key,
// section by section in the order of the config file's keys.
func (c *Config) validate() error {
	p := &problems{c: c}
	for _, section := range []func(*problems){c.validateServing, c.validateSources, c.validateCluster, c.validateMembership, c.validateAttestation,
		c.validateRendering, c.validateKea, c.validateSPIRE, c.validateOperation} {
		section(p)
	}
	return errors.Join(p.errs...)
}

// problems collects a config's problems, each naming its key.
type problems struct {
	c    *Config
	errs []error
}

func (p *problems) bad(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
}

// need reports whether v is set, and a problem when it is not.
func (p *problems) need(key, v string) bool {
	if v == "" {
		p.bad(key, "is required: set it (docs/operate.md, \"Configuration reference\", says what it takes)")
		return false
	}
	return true
}

// file needs path set and, unless the config is checked without its files, readable.
func (p *problems) file(key, path string) {
	if p.need(key, path) && !p.c.skipFiles {
		if _, err := os.Stat(p.c.Path(path)); err != nil {
			p.bad(key, "cannot read %s: %v: give the path of a file fleetd can read (relative paths are relative to the config file)", p.c.Path(path), errors.Unwrap(err))
		}
	}
}

// atLeast needs d to be min or longer.
func (p *problems) atLeast(key string, d Duration, min time.Duration) {
	if d.D() < min {
		p.bad(key, "%s is shorter than %s: give %s or longer", d.D(), min, min)
	}
}

// validateServing checks listen, public_url, tls and limits: how nodes and operators reach fleetd.
func (c *Config) validateServing(p *problems) {
	if err := hostPort(c.Listen.HTTP); err != nil {
		p.bad("listen.http", "%q is not host:port: give the plain listener's address, such as 127.0.0.1:8080", c.Listen.HTTP)
	}
	if p.need("public_url", c.PublicURL) {
		if err := httpURL(c.PublicURL); err != nil {
			p.bad("public_url", "%v: give the URL agents and nodes reach fleetd at, such as https://spore.lan:8443", err)
		}
	}
	switch {
	case c.TLS.Cert == "" && c.TLS.Key == "" && !c.TLS.PlaintextForDevelopment:
		p.bad("tls.cert", "is not set: fleetd serves the node routes (enrollment, configurations, boot checks) over TLS only; "+
			"set tls.cert, tls.key and listen.https (a development stack on one host may set tls.plaintext_for_development: true instead)")
	case c.TLS.Cert != "" && c.TLS.PlaintextForDevelopment:
		p.bad("tls.plaintext_for_development", "is true while tls.cert is set: choose one; remove tls.plaintext_for_development (a fleet on a lab network needs TLS)")
	}
	if c.TLS.Cert != "" || c.TLS.Key != "" || c.Listen.HTTPS != "" {
		p.file("tls.cert", c.TLS.Cert)
		p.file("tls.key", c.TLS.Key)
		if err := hostPort(c.Listen.HTTPS); err != nil {
			p.bad("listen.https", "%q is not host:port: tls needs the TLS listener's address, such as :8443", c.Listen.HTTPS)
		}
		if !strings.HasPrefix(c.PublicURL, "https://") {
			p.bad("public_url", "%q must be https:// when tls is set: agents and nodes reach the node routes over TLS only", c.PublicURL)
		}
	}
	if c.Limits.NodeRequestsPerMinute < 0 || c.Limits.NodeBurst < 0 {
		p.bad("limits", "node_requests_per_minute and node_burst must not be negative: give 0 for the defaults (60 and 20)")
	}
	if c.NetBox.WebhookWorkers < 0 {
		p.bad("netbox.webhook_workers", "%d is negative: set how many NetBox events are decided at once, or 0 for the default 16", c.NetBox.WebhookWorkers)
	}
	if c.Kubernetes.QPS < 0 || c.Kubernetes.Burst < 0 {
		p.bad("kubernetes", "qps and burst must not be negative (0 means the default: 500 and 2 × qps)")
	}
}

// validateSources checks netbox, kubernetes, classes_file and webhooks_file: what fleetd reads
// the fleet from and acts through.
func (c *Config) validateSources(p *problems) {
	if p.need("netbox.url", c.NetBox.URL) {
		if err := httpURL(c.NetBox.URL); err != nil {
			p.bad("netbox.url", "%v: give NetBox's base URL, such as https://netbox.lan", err)
		} else {
			c.validateNetBoxTransport(p)
		}
	}
	for i, src := range c.NetBox.WebhookSources {
		if _, err := parseSource(src); err != nil {
			p.bad(fmt.Sprintf("netbox.webhook_sources[%d]", i), "%q is not an IP address or prefix: give an address NetBox's webhooks come from (its RQ workers' host), such as 10.0.0.5 or 10.0.0.0/28", src)
		}
	}
	p.file("netbox.token_file", c.NetBox.TokenFile)
	p.file("netbox.webhook_secret_file", c.NetBox.WebhookSecretFile)
	if c.NetBox.ServiceUser == "" {
		p.bad("netbox.service_user", "is required: set the NetBox user fleetd's token belongs to; only its saves of a device vouch for the fields fleetd owns (docs/design.md §9)")
	}
	c.validateSealKeys(p)
	if c.NetBox.Retries < 0 || c.NetBox.Retries > 10 {
		p.bad("netbox.retries", "%d is outside 0..10: give how often a failed NetBox request is retried, 4 by default", c.NetBox.Retries)
	}
	p.atLeast("netbox.timeout", c.NetBox.Timeout, time.Second)
	p.atLeast("netbox.changelog_retention", c.NetBox.ChangeLogRetention, 24*time.Hour)
	if c.Kubernetes.Kubeconfig != "" {
		p.file("kubernetes.kubeconfig", c.Kubernetes.Kubeconfig)
	}
	switch c.Kubernetes.TinkerbellVersion {
	case "", "v0.25", "v0.12": // workflows.Versions
	default:
		p.bad("kubernetes.tinkerbell_version", "%q is not a Tinkerbell version fleetd supports: give v0.25 (tinkerbell/tinkerbell v0.25, the default) or v0.12 (tink v0.12)", c.Kubernetes.TinkerbellVersion)
	}
	p.file("classes_file", c.ClassesFile)
	if c.Webhooks != "" {
		p.file("webhooks_file", c.Webhooks)
	}
}

// validateCluster checks cluster: the authorization webhook's listener, its certificates and
// its policy. Without cluster.authorization.listen nothing else of it may be set: a certificate
// named for a listener that is not served would look like protection that is not there.
func (c *Config) validateCluster(p *problems) {
	a := c.Cluster.Authorization
	const key = "cluster.authorization"
	if a.Listen == "" {
		if a.Cert != "" || a.Key != "" || a.ClientCA != "" || len(a.UnmanagedNodes) > 0 || a.URL != "" || a.ServerCA != "" ||
			a.APIServerCert != "" || a.APIServerKey != "" {
			p.bad(key+".listen", "is not set while other cluster.authorization keys are: set the webhook's listen address, such as \":9443\", or remove the other keys")
		}
	} else {
		if err := hostPort(a.Listen); err != nil {
			p.bad(key+".listen", "%q is not host:port: give the webhook's TLS listener address, such as \":9443\"", a.Listen)
		} else if a.Listen == c.Listen.HTTP || a.Listen == c.Listen.HTTPS {
			p.bad(key+".listen", "%q is fleetd's other listener too: give the webhook a port of its own (it takes only the API server's client certificate)", a.Listen)
		}
		p.file(key+".cert", a.Cert)
		p.file(key+".key", a.Key)
		p.file(key+".client_ca", a.ClientCA)
		if a.ClientCA != "" && (c.Path(a.ClientCA) == c.Path(c.TLS.Cert)) {
			p.bad(key+".client_ca", "is tls.cert: give the CA of the API server's client certificate, not fleetd's own certificate")
		}
		c.validateWebhookClient(p)
	}
	for i, n := range a.UnmanagedNodes {
		if !nodeName(n) {
			p.bad(fmt.Sprintf("%s.unmanaged_nodes[%d]", key, i), "%q is not a Kubernetes node name: give the node's name as the cluster has it (lowercase letters, digits, '-' and '.', at most 253)", n)
		}
	}
	if b := a.DenyBrake; b != nil && (*b <= 0 || *b > 1) {
		p.bad(key+".deny_brake", "%g is not a share above 0 and at most 1: give the share of the nodes that may be denied at once before fleetd stops denying, 0.25 by default", *b)
	}
}

// nodeName reports whether n is a DNS-1123 subdomain, what Kubernetes names a Node.
func nodeName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// validateNetBoxTransport refuses a plain-HTTP NetBox unless the config says, explicitly, that
// this is a development stack; the opt-out with an https URL is refused as a contradiction.
func (c *Config) validateNetBoxTransport(p *problems) {
	u, _ := url.Parse(c.NetBox.URL) // httpURL parsed it
	switch {
	case u.Scheme == "http" && !c.NetBox.PlaintextForDevelopment:
		p.bad("netbox.url", "%q is plain HTTP: fleetd's NetBox token and every decision it writes would cross the network in clear; "+
			"use NetBox's https:// URL (a development stack whose NetBox runs on the same host may set netbox.plaintext_for_development: true instead)", c.NetBox.URL)
	case u.Scheme == "https" && c.NetBox.PlaintextForDevelopment:
		p.bad("netbox.plaintext_for_development", "is true while netbox.url %q is https: remove netbox.plaintext_for_development", c.NetBox.URL)
	}
}

// validateSealKeys checks netbox.seal_keys: at least one, each with an id a seal can carry (1 to
// 32 letters, digits, '-' or '_'), no id twice, and a secret file of at least MinSealSecret bytes.
func (c *Config) validateSealKeys(p *problems) {
	if len(c.NetBox.SealKeys) == 0 {
		p.bad("netbox.seal_keys", "is required: set at least one key ({id, file}) to seal the fields fleetd owns in NetBox; "+
			"make one with: head -c 48 /dev/urandom | base64 > seal-key (docs/operate.md, \"Seal keys\")")
	}
	seen := map[string]bool{}
	for i, k := range c.NetBox.SealKeys {
		key := fmt.Sprintf("netbox.seal_keys[%d]", i)
		if !sealKeyID(k.ID) {
			p.bad(key, "id %q is not 1 to 32 letters, digits, '-' or '_' (a seal names its key with it): give another", k.ID)
		}
		if seen[k.ID] {
			p.bad(key, "id %q is listed twice: give each key an id of its own", k.ID)
		}
		seen[k.ID] = true
		p.file(key, k.File)
		if k.File == "" || p.c.skipFiles {
			continue
		}
		if b, err := c.ReadSecret(key, k.File); err == nil && len(b) < MinSealSecret {
			p.bad(key, "the secret in %s is %d bytes, fewer than %d: give a longer one (head -c 48 /dev/urandom | base64)", c.Path(k.File), len(b), MinSealSecret)
		}
	}
}

func sealKeyID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// validateAttestation checks attestation, pki and config_delivery: what an enrollment is
// verified against, what it is issued, and how long its configuration waits.
func (c *Config) validateAttestation(p *problems) {
	switch c.Attestation.EKPolicy {
	case "hash":
	case "hash+cert":
		p.file("attestation.ek_ca_bundle", c.Attestation.EKCABundle)
	default:
		p.bad("attestation.ek_policy", "%q is unknown: use \"hash\" or \"hash+cert\"", c.Attestation.EKPolicy)
	}
	p.file("attestation.token_key_file", c.Attestation.TokenKeyFile)
	p.file("attestation.boot_policy_file", c.Attestation.BootPolicyFile)
	p.atLeast("attestation.token_lifetime", c.Attestation.TokenLifetime, 10*time.Second)
	for key, ca := range map[string]CA{"pki.ldevid": c.PKI.LDevID, "pki.lak": c.PKI.LAK} {
		p.file(key+".cert", ca.Cert)
		p.file(key+".key", ca.Key)
		p.atLeast(key+".lifetime", ca.Lifetime, time.Minute)
		if ca.RenewAfter.D() <= 0 || ca.RenewAfter.D() >= ca.Lifetime.D() {
			p.bad(key+".renew_after", "%s is not within the lifetime %s: a certificate must be renewed before it expires; give a positive duration shorter than %s.lifetime, or leave it unset for half of it", ca.RenewAfter.D(), ca.Lifetime.D(), key)
		}
	}
	p.atLeast("config_delivery.pending_ttl", c.Delivery.PendingTTL, time.Minute)
}

// validateRendering checks talos and seed: what the nodes' configurations are rendered from.
func (c *Config) validateRendering(p *problems) {
	p.file("talos.secrets_file", c.Talos.SecretsFile)
	p.need("talos.cluster_name", c.Talos.ClusterName)
	if p.need("talos.endpoint", c.Talos.Endpoint) {
		if err := httpURL(c.Talos.Endpoint); err != nil {
			p.bad("talos.endpoint", "%v: give the cluster's Kubernetes API endpoint, such as https://10.0.0.10:6443", err)
		}
	}
	if c.Seed.Gateway != "" {
		if _, err := netip.ParseAddr(c.Seed.Gateway); err != nil {
			p.bad("seed.gateway", "%q is not an IP address: give the nodes' gateway, such as 10.0.0.1", c.Seed.Gateway)
		}
	}
	for i, s := range c.Seed.DNS {
		if _, err := netip.ParseAddr(s); err != nil {
			p.bad(fmt.Sprintf("seed.dns[%d]", i), "%q is not an IP address: give a DNS server's address, such as 10.0.0.1", s)
		}
	}
}

// validateKea checks kea: the reservations fleetd writes for Kea.
func (c *Config) validateKea(p *problems) {
	if c.Kea.Subnet != "" {
		if pfx, err := netip.ParsePrefix(c.Kea.Subnet); err != nil || !pfx.Addr().Is4() {
			p.bad("kea.subnet", "%q is not an IPv4 prefix: give the subnet Kea's include of the reservations is in, such as 10.0.0.0/24", c.Kea.Subnet)
		}
	}
	if !filepath.IsAbs(c.Kea.ReservationsFile) {
		p.bad("kea.reservations_file", "%q is not an absolute path: Kea's include names the same file, so give its absolute path", c.Kea.ReservationsFile)
	}
	if c.Kea.ControlSocket != "" && !filepath.IsAbs(c.Kea.ControlSocket) {
		p.bad("kea.control_socket", "%q is not an absolute path: give the socket-name of Kea's control-socket", c.Kea.ControlSocket)
	}
}

// validateSPIRE checks spire: the server whose agents a wipe or a retirement bans.
func (c *Config) validateSPIRE(p *problems) {
	if c.SPIRE.ServerSocket != "" && !filepath.IsAbs(c.SPIRE.ServerSocket) {
		p.bad("spire.server_socket", "%q is not an absolute path: give the SPIRE server's socket_path (its admin API socket), or leave the key out to ban no agent", c.SPIRE.ServerSocket)
	}
}

// validateOperation checks operator, metrics, reconcile, boot_check, inventory and log: how
// fleetd runs.
func (c *Config) validateOperation(p *problems) {
	p.file("operator.token_file", c.Operator.TokenFile)
	if c.Metrics.TokenFile != "" {
		p.file("metrics.token_file", c.Metrics.TokenFile)
		if c.Path(c.Metrics.TokenFile) == c.Path(c.Operator.TokenFile) {
			p.bad("metrics.token_file", "is operator.token_file: give the metrics token a file of its own, so that whoever scrapes the per-device metrics has no operator rights")
		}
	}
	p.atLeast("reconcile.interval", c.Reconcile.Interval, 5*time.Second)
	p.atLeast("boot_check.missing_after", c.BootCheck.MissingAfter, time.Minute)
	p.atLeast("boot_check.nonce_lifetime", c.BootCheck.NonceLifetime, 10*time.Second)
	if w := c.Inventory.BootCheckWindow; w != nil && w.D() <= 0 {
		p.bad("inventory.boot_check_window", "%s is not positive: give how old an active node's last accepted boot check may be before the inventory check reports boot_checks_stopped, such as \"3h\"", w.D())
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.bad("log.level", "%q is unknown: use debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		p.bad("log.format", "%q is unknown: use json or console", c.Log.Format)
	}
}

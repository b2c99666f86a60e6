// Package config reads fleetd.yaml: strict YAML (an unknown key is an error), decoded into typed
// values and validated as a whole, so that `fleetd serve` and `fleetd check` list every problem at
// once (docs/design.md §7). Secrets are never in the file: it names files that hold them.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/kea"
	"gopkg.in/yaml.v3"
)

// Config is fleetd.yaml.
type Config struct {
	Listen      Listen      `yaml:"listen"`
	PublicURL   string      `yaml:"public_url"`
	NetBox      NetBox      `yaml:"netbox"`
	Kubernetes  Kubernetes  `yaml:"kubernetes"`
	Cluster     Cluster     `yaml:"cluster"`
	ClassesFile string      `yaml:"classes_file"`
	Webhooks    string      `yaml:"webhooks_file"`
	Attestation Attestation `yaml:"attestation"`
	PKI         PKI         `yaml:"pki"`
	Delivery    Delivery    `yaml:"config_delivery"`
	Talos       Talos       `yaml:"talos"`
	Seed        Seed        `yaml:"seed"`
	Kea         Kea         `yaml:"kea"`
	SPIRE       SPIRE       `yaml:"spire"`
	Operator    Operator    `yaml:"operator"`
	Metrics     Metrics     `yaml:"metrics"`
	Reconcile   Reconcile   `yaml:"reconcile"`
	BootCheck   BootCheck   `yaml:"boot_check"`
	Inventory   Inventory   `yaml:"inventory"`
	TLS         TLS         `yaml:"tls"`
	Limits      Limits      `yaml:"limits"`
	Log         Log         `yaml:"log"`

	dir       string // the config file's directory; relative paths in the file are relative to it
	skipFiles bool   // validate the shape only: the files the config names are not looked at
}

// Listen is where fleetd serves.
type Listen struct {
	HTTP  string `yaml:"http"`  // every route; node routes only when tls is not configured
	HTTPS string `yaml:"https"` // every route over TLS (tls.cert/tls.key); required when tls is set
}

// TLS is fleetd's server certificate for the node-facing routes (the configurations it serves
// hold cluster secrets, the enrollment hands out fetch secrets). It is required: node routes are
// refused on the plain listener, and fleetd does not start without a certificate unless
// PlaintextForDevelopment says, explicitly, that this is a development setup
// (docs/security.md, "Transport and abuse").
type TLS struct {
	Cert string `yaml:"cert"` // PEM: the server certificate, then its chain
	Key  string `yaml:"key"`
	// PlaintextForDevelopment lets fleetd start without tls.cert and serve node routes on the
	// plain listener: a development stack on one host only, never a lab network.
	PlaintextForDevelopment bool `yaml:"plaintext_for_development"`
}

// Limits bound what one source address may ask of the node-facing routes.
type Limits struct {
	NodeRequestsPerMinute float64 `yaml:"node_requests_per_minute"`
	NodeBurst             int     `yaml:"node_burst"`
}

// NetBox is how fleetd reaches NetBox and checks its webhooks.
type NetBox struct {
	// URL is NetBox's base URL. It must be https://: fleetd's token and every decision fleetd
	// writes cross it. PlaintextForDevelopment allows http:// for a development stack whose
	// NetBox runs on the same host (fleetd logs a warning at start).
	URL                     string `yaml:"url"`
	PlaintextForDevelopment bool   `yaml:"plaintext_for_development"`
	// WebhookSources are the addresses (or prefixes) NetBox's webhooks come from: the host of its
	// RQ workers. Webhooks from them are read in a pool of their own, so that other hosts'
	// unauthenticated bodies never hold NetBox's deliveries back (docs/security.md, "Transport
	// and abuse"). Empty: every source shares one pool, and fleetd logs a warning at start.
	WebhookSources    []string `yaml:"webhook_sources"`
	TokenFile         string   `yaml:"token_file"`
	WebhookSecretFile string   `yaml:"webhook_secret_file"`
	ServiceUser       string   `yaml:"service_user"` // the NetBox user fleetd's token belongs to: only its saves vouch for fleetd's fields
	// SealKeys are the keys of the seal over the fields fleetd owns (docs/operate.md, "Seal
	// keys"): the first seals every write, each one verifies. Every instance has the same list.
	SealKeys []SealKey `yaml:"seal_keys"`
	// ChangeLogRetention is NetBox's CHANGELOG_RETENTION (90 days by default; set a long time
	// when NetBox keeps its change log for ever): how far back fleetd reads the change log after
	// a start, and how old facts may be before a declaration change could be missed.
	ChangeLogRetention Duration `yaml:"changelog_retention"`
	Timeout            Duration `yaml:"timeout"`
	Retries            int      `yaml:"retries"`
	// WebhookWorkers is how many NetBox events are re-read and decided at once; each holds up to
	// three NetBox requests at a time (a device read). 0 means 16 (docs/performance.md).
	WebhookWorkers int `yaml:"webhook_workers"`
}

// SealKey names one seal key: its id (written in every seal it makes) and the file that holds its
// secret, at least MinSealSecret bytes once trimmed.
type SealKey struct {
	ID   string `yaml:"id"`
	File string `yaml:"file"`
}

// MinSealSecret is the shortest seal secret fleetd accepts (fleet.MinSealSecret).
const MinSealSecret = 32

// Kubernetes is how fleetd reaches Tinkerbell's API.
type Kubernetes struct {
	Kubeconfig string  `yaml:"kubeconfig"` // empty: in-cluster configuration
	Namespace  string  `yaml:"namespace"`
	QPS        float64 `yaml:"qps"`   // the client's sustained requests per second to the API server; 0 means 500
	Burst      int     `yaml:"burst"` // requests above QPS allowed at once; 0 means 2 × qps
	// TinkerbellVersion is the Tinkerbell the site runs: "v0.25" (the default) or "v0.12"
	// (workflows.Versions). fleetd renders and checks Templates as that version's controller
	// does (docs/operate.md, "Tinkerbell").
	TinkerbellVersion string `yaml:"tinkerbell_version"`
}

// Cluster is the workload cluster fleetd's nodes join (docs/operate.md, "Cluster membership").
type Cluster struct {
	Authorization ClusterAuthorization `yaml:"authorization"`
	Membership    `yaml:",inline"`
}

// ClusterAuthorization is the SubjectAccessReview webhook the cluster's API server asks about
// its nodes' requests, before its Node and RBAC authorizers: a TLS listener of its own that takes
// only clients with a certificate of ClientCA (the API server's). Listen empty: not served.
type ClusterAuthorization struct {
	Listen   string `yaml:"listen"`    // host:port of the webhook's TLS listener
	Cert     string `yaml:"cert"`      // PEM: its serving certificate, then its chain
	Key      string `yaml:"key"`       // PEM: its key
	ClientCA string `yaml:"client_ca"` // PEM: the CA of the API server's client certificate, and no other's
	// UnmanagedNodes are the node names fleetd does not manage (a control plane installed by
	// hand): fleetd has no opinion about them. Any other node no NetBox device is named for is
	// denied.
	UnmanagedNodes []string `yaml:"unmanaged_nodes"`
	// DenyBrake is the share of the nodes that asked lately above which (and at least 3) fleetd
	// stops denying and alerts; unset means 0.25. A pointer, so that a written 0 is refused
	// rather than taken for unset.
	DenyBrake *float64 `yaml:"deny_brake"`

	// The API server's side, which fleetd renders into the Talos control plane configs of the
	// classes that join Kubernetes (docs/operate.md, "Cluster membership"): all four or none.
	// None: nothing more is rendered, and the API server is set up by other means.
	URL           string `yaml:"url"`            // https://NAME:PORT/v1/cluster/authorize, NAME a name of Cert
	ServerCA      string `yaml:"server_ca"`      // PEM: the CA that verifies Cert
	APIServerCert string `yaml:"apiserver_cert"` // PEM: the API server's client certificate, of ClientCA
	APIServerKey  string `yaml:"apiserver_key"`  // PEM: its key
}

// Rendered reports whether the API server's side of the webhook is rendered into the Talos
// control plane configs (its keys are set; validate checked they all are).
func (a ClusterAuthorization) Rendered() bool { return a.URL != "" }

// AuthorizePath is the webhook's path, the path of cluster.authorization.url (docs/http.md, "The
// cluster's authorization webhook").
const AuthorizePath = "/v1/cluster/authorize"

// DefaultDenyBrake is cluster.authorization.deny_brake when unset.
const DefaultDenyBrake = 0.25

// Attestation is the fleet's enrollment policy (docs/design.md §4).
type Attestation struct {
	EKPolicy      string   `yaml:"ek_policy"`    // "hash" or "hash+cert"
	EKCABundle    string   `yaml:"ek_ca_bundle"` // PEM: manufacturer roots and issuing CAs
	TokenKeyFile  string   `yaml:"token_key_file"`
	TokenLifetime Duration `yaml:"token_lifetime"`
	// BootPolicyFile is the boot policy (attest.BootPolicyFile JSON, written by `fleetd policy
	// learn`): the HookOS boots an enrollment may come from (docs/security.md). Required.
	BootPolicyFile string `yaml:"boot_policy_file"`
}

// PKI names the two issuing CAs and the certificate lifetimes.
type PKI struct {
	LDevID CA `yaml:"ldevid"`
	LAK    CA `yaml:"lak"`
}

// CA is one issuing CA: its certificate chain (issuing CA first, then up to the root), its key,
// the lifetime of the certificates it issues, and their renewal point: how old a certificate
// gets before an accepted boot check renews it (docs/enrollment.md, "Renewal"); half the
// lifetime when unset.
type CA struct {
	Cert       string   `yaml:"cert"`
	Key        string   `yaml:"key"`
	Lifetime   Duration `yaml:"lifetime"`
	RenewAfter Duration `yaml:"renew_after"`
}

// Delivery is the one-time configuration delivery.
type Delivery struct {
	PendingTTL Duration `yaml:"pending_ttl"`
}

// Talos is what Talos machine configs are generated from.
type Talos struct {
	SecretsFile       string `yaml:"secrets_file"`
	TalosVersion      string `yaml:"talos_version"` // the contract of the Talos the nodes run, e.g. "v1.11"
	ClusterName       string `yaml:"cluster_name"`
	Endpoint          string `yaml:"endpoint"`
	KubernetesVersion string `yaml:"kubernetes_version"`
}

// Seed is what nixos-image and alpine-image seeds and NoCloud network configs carry.
type Seed struct {
	Gateway   string            `yaml:"gateway"`
	DNS       []string          `yaml:"dns"`
	NTP       []string          `yaml:"ntp"`
	Endpoints map[string]string `yaml:"endpoints"`
}

// Kea is where the DHCP reservations go.
type Kea struct {
	ReservationsFile string `yaml:"reservations_file"`
	ControlSocket    string `yaml:"control_socket"` // Kea's unix control socket; empty: write the file, never reload
	Subnet           string `yaml:"subnet"`         // the Kea subnet the file is included in; devices outside it are left out
}

// SPIRE is the SPIRE server whose agents fleetd bans when a device's wipe or retirement starts
// (docs/operate.md, "SPIRE"). Without server_socket no agent is banned.
type SPIRE struct {
	// ServerSocket is the SPIRE server's admin API socket (its socket_path), an absolute path.
	ServerSocket string `yaml:"server_socket"`
}

// Operator is how operator routes authenticate.
type Operator struct {
	TokenFile string `yaml:"token_file"`
}

// Metrics is how the per-device metrics authenticate their scraper.
type Metrics struct {
	// TokenFile holds the bearer token of GET /metrics/devices, the series that name each device:
	// a token of its own, so that Prometheus needs no operator rights. Unset: those series are
	// not served (docs/operate.md, "Metrics and alerts").
	TokenFile string `yaml:"token_file"`
}

// Reconcile is the periodic full reconcile.
type Reconcile struct {
	Interval Duration `yaml:"interval"`
}

// BootCheck is the hourly boot check's policy.
type BootCheck struct {
	MissingAfter  Duration `yaml:"missing_after"`
	NonceLifetime Duration `yaml:"nonce_lifetime"`
}

// Inventory is the inventory check's policy (docs/design.md §10).
type Inventory struct {
	// BootCheckWindow is how old an active node's last accepted boot check may be before the
	// inventory check reports boot_checks_stopped; unset means 3h (three hourly checks missed).
	// A pointer, so that a written 0s is refused rather than taken for unset.
	BootCheckWindow *Duration `yaml:"boot_check_window"`
}

// DefaultInventoryBootCheckWindow is inventory.boot_check_window when unset.
const DefaultInventoryBootCheckWindow = 3 * time.Hour

// Log is the log output.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // json or console
}

// Override holds command-line values that replace the file's (the NixOS module passes the
// listen addresses as flags). Empty fields leave the file's values.
type Override struct {
	ListenHTTP, ListenHTTPS string
	// SkipFiles validates everything but the existence of the files the config names (secrets,
	// CAs): `fleetd check --skip-files` in the infrastructure repo's CI, where they do not exist.
	SkipFiles bool
}

// Load reads and validates the config file at path, with the overrides applied before validation.
func Load(path string, o ...Override) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	c, err := Parse(f, filepath.Dir(path), o...)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a config strictly, applies overrides and defaults, and validates it as a whole.
// dir resolves relative file names. The error lists every problem, one per line.
func Parse(r io.Reader, dir string, o ...Override) (*Config, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	c := &Config{dir: dir}
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, fmt.Errorf("decode: %s", strings.TrimPrefix(namedKey(raw, err).Error(), "yaml: "))
	}
	for _, ov := range o {
		if ov.ListenHTTP != "" {
			c.Listen.HTTP = ov.ListenHTTP
		}
		if ov.ListenHTTPS != "" {
			c.Listen.HTTPS = ov.ListenHTTPS
		}
		c.skipFiles = c.skipFiles || ov.SkipFiles
	}
	c.defaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) defaults() {
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	if c.Listen.HTTP == "" {
		c.Listen.HTTP = ":8080"
	}
	def(&c.NetBox.Timeout, 10*time.Second)
	def(&c.NetBox.ChangeLogRetention, 90*24*time.Hour)
	def(&c.Cluster.JoinDeadline, DefaultJoinDeadline)
	if c.NetBox.Retries == 0 {
		c.NetBox.Retries = 4
	}
	if c.NetBox.WebhookWorkers == 0 {
		c.NetBox.WebhookWorkers = 16
	}
	if c.Kubernetes.Namespace == "" {
		c.Kubernetes.Namespace = "tink-system"
	}
	if c.Kubernetes.QPS == 0 {
		c.Kubernetes.QPS = 500
	}
	if c.Kubernetes.Burst == 0 {
		c.Kubernetes.Burst = int(2 * c.Kubernetes.QPS)
	}
	if c.Attestation.EKPolicy == "" {
		c.Attestation.EKPolicy = "hash+cert"
	}
	def(&c.Attestation.TokenLifetime, 10*time.Minute)
	// Accepted boot checks renew both certificates from their renewal point (half the lifetime
	// by default), so they can be short. An LDevID is accepted by SPIRE until it expires, and a
	// retired or wiped node's is never renewed, so its lifetime bounds what such a machine can
	// do; the LAK is cut off by lak_serial anyway, and lives longer so that a node whose LDevID
	// lapsed while spore was down still passes its checks and is renewed (docs/enrollment.md).
	def(&c.PKI.LDevID.Lifetime, 7*24*time.Hour)
	def(&c.PKI.LAK.Lifetime, 30*24*time.Hour)
	def(&c.PKI.LDevID.RenewAfter, c.PKI.LDevID.Lifetime.D()/2)
	def(&c.PKI.LAK.RenewAfter, c.PKI.LAK.Lifetime.D()/2)
	def(&c.Delivery.PendingTTL, 4*time.Hour)
	def(&c.Reconcile.Interval, 2*time.Minute)
	def(&c.BootCheck.MissingAfter, 2*time.Hour)
	def(&c.BootCheck.NonceLifetime, 5*time.Minute)
	if c.Inventory.BootCheckWindow == nil {
		w := Duration(DefaultInventoryBootCheckWindow)
		c.Inventory.BootCheckWindow = &w
	}
	if c.Kea.ReservationsFile == "" {
		c.Kea.ReservationsFile = kea.DefaultPath
	}
	if c.Limits.NodeRequestsPerMinute == 0 {
		c.Limits.NodeRequestsPerMinute = 60
	}
	if c.Limits.NodeBurst == 0 {
		c.Limits.NodeBurst = 20
	}
	if c.Cluster.Authorization.DenyBrake == nil {
		b := DefaultDenyBrake
		c.Cluster.Authorization.DenyBrake = &b
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "json"
	}
}

// Path resolves a file name from the config relative to the config file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

// ReadSecret reads a secret file named in the config, trimmed of surrounding whitespace.
func (c *Config) ReadSecret(key, p string) ([]byte, error) {
	b, err := os.ReadFile(c.Path(p))
	if err != nil {
		return nil, fmt.Errorf("%s: read secret: %w", key, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: secret file %s is empty", key, c.Path(p))
	}
	return b, nil
}

// WebhookSourcePrefixes are netbox.webhook_sources as prefixes (an address is its /32 or /128).
// The config was validated: every entry parses.
func (c *Config) WebhookSourcePrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.NetBox.WebhookSources))
	for _, s := range c.NetBox.WebhookSources {
		if p, err := parseSource(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseSource reads an IP address (as its single-address prefix) or a prefix.
func parseSource(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

func hostPort(s string) error {
	_, _, err := net.SplitHostPort(s)
	return err
}

func httpURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL with a host", s)
	}
	return nil
}

package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// validConfig writes a complete config and the files it names into a temp dir.
func validConfig(t *testing.T) (string, string) {
	t.Helper()
	return validConfigDir(t)
}

func validConfigDir(t testing.TB) (string, string) {
	dir := t.TempDir()
	for _, f := range []string{"nb-token", "wh-secret", "classes.json", "ek.pem", "tok-key", "ldevid.pem", "ldevid.key",
		"lak.pem", "lak.key", "talos-secrets", "op-token", "kubeconfig", "boot-policy.json", "tls.crt", "tls.key",
		"authz.crt", "authz.key", "apiserver-client-ca.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for f, secret := range map[string]string{"seal-k1": strings.Repeat("k", MinSealSecret), "seal-short": strings.Repeat("s", MinSealSecret-1)} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, `
listen: {http: "127.0.0.1:8080", https: ":8443"}
public_url: https://spore.lan:8443
tls: {cert: tls.crt, key: tls.key}
netbox: {url: "https://netbox.lan", token_file: nb-token, webhook_secret_file: wh-secret, service_user: fleetd, seal_keys: [{id: k1, file: seal-k1}]}
kubernetes: {kubeconfig: kubeconfig}
classes_file: classes.json
attestation: {ek_ca_bundle: ek.pem, token_key_file: tok-key, boot_policy_file: boot-policy.json}
pki:
  ldevid: {cert: ldevid.pem, key: ldevid.key, lifetime: 720h}
  lak: {cert: lak.pem, key: lak.key}
talos: {secrets_file: talos-secrets, cluster_name: folly, endpoint: "https://10.0.0.10:6443"}
seed: {gateway: 10.0.0.1, dns: [10.0.0.1]}
kea: {subnet: 10.0.0.0/24}
operator: {token_file: op-token}
`
}

func TestParseDefaults(t *testing.T) {
	dir, text := validConfig(t)
	c, err := Parse(strings.NewReader(text), dir)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"reconcile.interval default", c.Reconcile.Interval.D(), 2 * time.Minute},
		{"pending_ttl default", c.Delivery.PendingTTL.D(), 4 * time.Hour},
		{"ek_policy default", c.Attestation.EKPolicy, "hash+cert"},
		{"namespace default", c.Kubernetes.Namespace, "tink-system"},
		{"ldevid lifetime as written", c.PKI.LDevID.Lifetime.D(), 720 * time.Hour},
		{"lak lifetime default", c.PKI.LAK.Lifetime.D(), 30 * 24 * time.Hour},
		{"ldevid renewal point default: half its lifetime", c.PKI.LDevID.RenewAfter.D(), 360 * time.Hour},
		{"lak renewal point default: half its lifetime", c.PKI.LAK.RenewAfter.D(), 15 * 24 * time.Hour},
		{"relative path resolved", c.Path(c.ClassesFile), filepath.Join(dir, "classes.json")},
		{"webhook_workers default", c.NetBox.WebhookWorkers, 16},
		{"kubernetes.qps default", c.Kubernetes.QPS, 500.0},
		{"kubernetes.burst default: twice qps", c.Kubernetes.Burst, 1000},
		{"inventory.boot_check_window default", c.Inventory.BootCheckWindow.D(), 3 * time.Hour},
		{"cluster.authorization.deny_brake default", *c.Cluster.Authorization.DenyBrake, 0.25},
		{"cluster.authorization.listen default (not served)", c.Cluster.Authorization.Listen, ""},
		{"cluster.join_deadline default", c.Cluster.JoinDeadline.D(), 30 * time.Minute},
		{"cluster.kubeconfig default: no workload cluster", c.Cluster.Kubeconfig, ""},
		{"netbox.changelog_retention default: NetBox's CHANGELOG_RETENTION", c.NetBox.ChangeLogRetention.D(), 90 * 24 * time.Hour},
		{"netbox.seal_keys as written", c.NetBox.SealKeys[0], SealKey{ID: "k1", File: "seal-k1"}},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	c, err = Parse(strings.NewReader(text+"inventory: {boot_check_window: 90s}\n"), dir)
	if err != nil || c.Inventory.BootCheckWindow.D() != 90*time.Second {
		t.Errorf("inventory.boot_check_window: 90s read as %v, %v", c.Inventory.BootCheckWindow, err)
	}
	tok, err := c.ReadSecret("netbox.token_file", c.NetBox.TokenFile)
	if err != nil || string(tok) != "x" {
		t.Errorf("ReadSecret = %q, %v; want the trimmed content", tok, err)
	}
}

func TestParseRefusals(t *testing.T) {
	dir, good := validConfig(t)
	rows := []struct {
		name string
		edit func(string) string
		want []string
	}{
		{"refuse/unknown key names the line", func(s string) string { return s + "colour: red\n" },
			[]string{"field colour not found"}},
		{"refuse/empty file", func(string) string { return "" }, []string{"the file is empty"}},
		{"refuse/bad duration names its key", func(s string) string { return s + "reconcile: {interval: soon}\n" },
			[]string{`reconcile.interval: "soon" is not a duration`}},
		{"refuse/a duration that is no string names its key", func(s string) string { return s + "boot_check:\n  missing_after: [2h]\n" },
			[]string{`boot_check.missing_after: want a duration`}},
		{"refuse/unparsable inventory window", func(s string) string { return s + "inventory:\n  boot_check_window: three hours\n" },
			[]string{`inventory.boot_check_window: "three hours" is not a duration`}},
		{"refuse/zero inventory window", func(s string) string { return s + "inventory: {boot_check_window: 0s}\n" },
			[]string{"inventory.boot_check_window: 0s is not positive"}},
		{"refuse/negative inventory window", func(s string) string { return s + "inventory: {boot_check_window: -1h}\n" },
			[]string{"inventory.boot_check_window: -1h0m0s is not positive"}},
		{"ok/inventory window", func(s string) string { return s + "inventory: {boot_check_window: 90s}\n" }, nil},
		{"ok/the workload cluster", func(s string) string { return s + "cluster: {kubeconfig: kubeconfig, join_deadline: 45m}\n" }, nil},
		{"ok/the shortest join deadline", func(s string) string { return s + "cluster: {kubeconfig: kubeconfig, join_deadline: 1m}\n" }, nil},
		{"refuse/a join deadline too short to boot", func(s string) string { return s + "cluster: {join_deadline: 59s}\n" },
			[]string{"cluster.join_deadline: 59s is shorter than 1m0s"}},
		{"refuse/the workload cluster's kubeconfig missing", func(s string) string { return s + "cluster: {kubeconfig: no-such-file}\n" },
			[]string{"cluster.kubeconfig: cannot read"}},
		{"refuse/an unknown cluster key", func(s string) string { return s + "cluster: {kube_config: kubeconfig}\n" },
			[]string{"kube_config"}},
		{"refuse/every problem listed", func(s string) string {
			s = strings.Replace(s, "public_url: https://spore.lan:8443", "public_url: spore", 1)
			s = strings.Replace(s, "token_file: nb-token", "token_file: missing-token", 1)
			s = strings.Replace(s, "gateway: 10.0.0.1", "gateway: ten", 1)
			s = strings.Replace(s, "subnet: 10.0.0.0/24", "subnet: 10.0.0.0", 1)
			s = strings.Replace(s, "lifetime: 720h", "lifetime: 30s", 1)
			s = strings.Replace(s, "lak: {cert: lak.pem, key: lak.key}", "lak: {cert: lak.pem, key: lak.key, lifetime: 24h, renew_after: 24h}", 1)
			s = strings.Replace(s, "attestation: {", "attestation: {ek_policy: trust-me, ", 1)
			return s + "log: {level: loud}\n"
		}, []string{
			`public_url: "spore" is not an http(s) URL`,
			"netbox.token_file: cannot read",
			`seed.gateway: "ten" is not an IP address`,
			`kea.subnet: "10.0.0.0" is not an IPv4 prefix`,
			"pki.ldevid.lifetime: 30s is shorter than 1m0s",
			"pki.lak.renew_after: 24h0m0s is not within the lifetime 24h0m0s",
			`attestation.ek_policy: "trust-me" is unknown`,
			`log.level: "loud" is unknown`,
		}},
		{"refuse/relative SPIRE server socket", func(s string) string { return s + "spire: {server_socket: spire/api.sock}\n" },
			[]string{`spire.server_socket: "spire/api.sock" is not an absolute path`}},
		{"refuse/unknown SPIRE key", func(s string) string { return s + "spire: {socket: /run/spire/server/api.sock}\n" },
			[]string{"field socket not found"}},
		{"ok/SPIRE server socket", func(s string) string { return s + "spire: {server_socket: /run/spire/server/api.sock}\n" }, nil},
		{"refuse/relative Kea paths", func(s string) string {
			return strings.Replace(s, "kea: {subnet: 10.0.0.0/24}", "kea: {subnet: 10.0.0.0/24, reservations_file: fleet.json, control_socket: kea.sock}", 1)
		}, []string{`kea.reservations_file: "fleet.json" is not an absolute path`, `kea.control_socket: "kea.sock" is not an absolute path`}},
		{"refuse/an unknown Tinkerbell version", func(s string) string {
			return strings.Replace(s, "kubernetes: {kubeconfig: kubeconfig}", "kubernetes: {kubeconfig: kubeconfig, tinkerbell_version: v0.18}", 1)
		}, []string{`kubernetes.tinkerbell_version: "v0.18" is not a Tinkerbell version fleetd supports: give v0.25`}},
		{"ok/Tinkerbell v0.12", func(s string) string {
			return strings.Replace(s, "kubernetes: {kubeconfig: kubeconfig}", "kubernetes: {kubeconfig: kubeconfig, tinkerbell_version: v0.12}", 1)
		}, nil},
		{"refuse/negative webhook workers", func(s string) string {
			return strings.Replace(s, "netbox: {", "netbox: {webhook_workers: -1, ", 1)
		}, []string{"netbox.webhook_workers: -1 is negative"}},
		{"refuse/hash+cert needs a CA bundle", func(s string) string {
			return strings.Replace(s, "ek_ca_bundle: ek.pem, ", "", 1)
		}, []string{"attestation.ek_ca_bundle: is required"}},
		{"refuse/no boot policy", func(s string) string {
			return strings.Replace(s, ", boot_policy_file: boot-policy.json", "", 1)
		}, []string{"attestation.boot_policy_file: is required"}},
		{"refuse/no TLS for the node routes", func(s string) string {
			return strings.Replace(s, "tls: {cert: tls.crt, key: tls.key}\n", "", 1)
		}, []string{"tls.cert: is not set: fleetd serves the node routes (enrollment, configurations, boot checks) over TLS only",
			"tls.plaintext_for_development: true"}},
		{"ok/a development stack's explicit opt-out", func(s string) string {
			s = strings.Replace(s, "tls: {cert: tls.crt, key: tls.key}\n", "tls: {plaintext_for_development: true}\n", 1)
			s = strings.Replace(s, `, https: ":8443"`, "", 1)
			return strings.Replace(s, "public_url: https://spore.lan:8443", "public_url: http://127.0.0.1:8080", 1)
		}, nil},
		{"refuse/TLS and the opt-out at once", func(s string) string {
			return strings.Replace(s, "tls: {cert: tls.crt, key: tls.key}", "tls: {cert: tls.crt, key: tls.key, plaintext_for_development: true}", 1)
		}, []string{"tls.plaintext_for_development: is true while tls.cert is set"}},
		{"refuse/a plain-HTTP NetBox", func(s string) string {
			return strings.Replace(s, `url: "https://netbox.lan"`, `url: "http://netbox.lan"`, 1)
		}, []string{`netbox.url: "http://netbox.lan" is plain HTTP: fleetd's NetBox token and every decision it writes would cross the network in clear; use NetBox's https:// URL`,
			"netbox.plaintext_for_development: true"}},
		{"ok/a development stack's plain-HTTP NetBox, said explicitly", func(s string) string {
			return strings.Replace(s, `url: "https://netbox.lan"`, `url: "http://127.0.0.1:8001", plaintext_for_development: true`, 1)
		}, nil},
		{"refuse/the NetBox opt-out with an https NetBox", func(s string) string {
			return strings.Replace(s, `url: "https://netbox.lan"`, `url: "https://netbox.lan", plaintext_for_development: true`, 1)
		}, []string{`netbox.plaintext_for_development: is true while netbox.url "https://netbox.lan" is https: remove netbox.plaintext_for_development`}},
		{"refuse/a webhook source that is no address", func(s string) string {
			return strings.Replace(s, `url: "https://netbox.lan"`, `url: "https://netbox.lan", webhook_sources: [10.0.0.5, netbox.lan, 10.0.0.0/33]`, 1)
		}, []string{`netbox.webhook_sources[1]: "netbox.lan" is not an IP address or prefix`, `netbox.webhook_sources[2]: "10.0.0.0/33"`}},
		{"ok/webhook sources", func(s string) string {
			return strings.Replace(s, `url: "https://netbox.lan"`, `url: "https://netbox.lan", webhook_sources: [10.0.0.5, "fd00::/64", "::ffff:10.0.0.6"]`, 1)
		}, nil},
		{"ok/a metrics token of its own", func(s string) string { return s + "metrics: {token_file: nb-token}\n" }, nil},
		{"refuse/the operator token as the metrics token", func(s string) string { return s + "metrics: {token_file: op-token}\n" },
			[]string{"metrics.token_file: is operator.token_file: give the metrics token a file of its own"}},
		{"refuse/a metrics token file that is not there", func(s string) string { return s + "metrics: {token_file: missing}\n" },
			[]string{"metrics.token_file: cannot read"}},
		{"refuse/no service user", func(s string) string {
			return strings.Replace(s, ", service_user: fleetd", "", 1)
		}, []string{"netbox.service_user: is required: set the NetBox user fleetd's token belongs to"}},
		{"refuse/no seal key", func(s string) string {
			return strings.Replace(s, ", seal_keys: [{id: k1, file: seal-k1}]", "", 1)
		}, []string{"netbox.seal_keys: is required: set at least one key"}},
		{"refuse/seal keys wrong", func(s string) string {
			return strings.Replace(s, "seal_keys: [{id: k1, file: seal-k1}]", "seal_keys: [{id: k1, file: seal-k1}, {id: k1, file: seal-k1}, {id: 'k.2', file: seal-short}, {id: k3, file: seal-gone}]", 1)
		}, []string{`netbox.seal_keys[1]: id "k1" is listed twice`, `netbox.seal_keys[2]: id "k.2" is not 1 to 32 letters`,
			"netbox.seal_keys[2]: the secret in", "is 31 bytes, fewer than 32", "netbox.seal_keys[3]: cannot read"}},
		{"ok/a second key: verifies, the first seals", func(s string) string {
			return strings.Replace(s, "seal_keys: [{id: k1, file: seal-k1}]", "seal_keys: [{id: k2, file: seal-k1}, {id: k1, file: seal-k1}]", 1)
		}, nil},
		{"refuse/a change log kept less than a day", func(s string) string {
			return strings.Replace(s, "service_user: fleetd", "service_user: fleetd, changelog_retention: 1h", 1)
		}, []string{"netbox.changelog_retention: 1h0m0s is shorter than 24h0m0s"}},
		{"ok/the authorization webhook", func(s string) string {
			return s + "cluster:\n  authorization: {listen: \":9443\", cert: authz.crt, key: authz.key, client_ca: apiserver-client-ca.pem, unmanaged_nodes: [cp-1, cp-2.lab], deny_brake: 0.5}\n"
		}, nil},
		{"refuse/authorization keys without its listener", func(s string) string {
			return s + "cluster:\n  authorization: {cert: authz.crt, unmanaged_nodes: [cp-1]}\n"
		}, []string{"cluster.authorization.listen: is not set while other cluster.authorization keys are"}},
		{"refuse/authorization listener wrong", func(s string) string {
			return s + "cluster:\n  authorization: {listen: \"9443\", key: missing.key, client_ca: tls.crt, unmanaged_nodes: [CP-1, -x, \"\"], deny_brake: 0}\n"
		}, []string{
			`cluster.authorization.listen: "9443" is not host:port`,
			"cluster.authorization.cert: is required",
			"cluster.authorization.key: cannot read",
			"cluster.authorization.client_ca: is tls.cert",
			`cluster.authorization.unmanaged_nodes[0]: "CP-1" is not a Kubernetes node name`,
			`cluster.authorization.unmanaged_nodes[1]: "-x" is not a Kubernetes node name`,
			`cluster.authorization.unmanaged_nodes[2]: "" is not a Kubernetes node name`,
			"cluster.authorization.deny_brake: 0 is not a share above 0 and at most 1",
		}},
		{"refuse/authorization on fleetd's own listener, brake over 1", func(s string) string {
			return s + "cluster:\n  authorization: {listen: \":8443\", cert: authz.crt, key: authz.key, client_ca: apiserver-client-ca.pem, deny_brake: 1.5}\n"
		}, []string{
			`cluster.authorization.listen: ":8443" is fleetd's other listener too`,
			"cluster.authorization.deny_brake: 1.5 is not a share above 0 and at most 1",
		}},
		{"ok/hash policy needs no CA bundle", func(s string) string {
			return strings.Replace(s, "attestation: {ek_ca_bundle: ek.pem, ", "attestation: {ek_policy: hash, ", 1)
		}, nil},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(r.edit(good)), dir)
			if r.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
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

// keyProblem is one line of validate's error: the key, then what is wrong.
var keyProblem = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)*(\[[0-9]+\])?: `)

// checkProblemsSayWhatToDo: every problem validate reports names its key, what was wrong and what
// to do about it (a verb of what to do after the problem).
func checkProblemsSayWhatToDo(t *testing.T, err error) {
	t.Helper()
	if msg := err.Error(); strings.HasPrefix(msg, "decode: ") || msg == "the file is empty" {
		return // YAML's own: the key and line it could not read
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !keyProblem.MatchString(line) {
			t.Errorf("a problem does not begin with its key: %q", line)
			continue
		}
		if !regexp.MustCompile(`\b(give|use|set|remove|choose|leave)\b`).MatchString(line) {
			t.Errorf("a problem does not say what to do: %q", line)
		}
	}
}

// TestExampleConfig: examples/fleetd.yaml has the right shape; the only problems are the files
// it names on spore, which do not exist here.
func TestExampleConfig(t *testing.T) {
	f, err := os.Open("../examples/fleetd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Parse(f, "../examples")
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.Contains(line, "cannot read") {
			t.Errorf("examples/fleetd.yaml: %s", line)
		}
	}
}

// TestSkipFiles: --skip-files validates the shape of a config whose files do not exist here, and
// still refuses what is wrong in it.
func TestSkipFiles(t *testing.T) {
	f, err := os.Open("../examples/fleetd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Parse(f, "../examples", Override{SkipFiles: true}); err != nil {
		t.Fatalf("examples/fleetd.yaml with SkipFiles: %v", err)
	}
	_, err = Parse(strings.NewReader("public_url: nope\n"), t.TempDir(), Override{SkipFiles: true})
	if err == nil || !strings.Contains(err.Error(), "public_url") || strings.Contains(err.Error(), "cannot read") {
		t.Fatalf("SkipFiles: %v, want the public_url problem and no file problem", err)
	}
}

package stack

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/config"
)

// fleetdConfig is what the stack's fleetd.yaml is made from.
type fleetdConfig struct {
	opts          Options
	fleetdURL     string // https: public_url, the node routes
	httpURL       string // plain http: NetBox's webhooks, health, the fleet-wide metrics
	netboxURL     string
	gatewayAddr   netip.Addr
	talosEndpoint string
	workload      *workloadConf // the cluster: section with Options.WorkloadCluster, else nil
}

// writeFleetdConfig copies examples/classes.json into the state directory, learns the boot
// policy, and writes fleetd.yaml next to them (writeFleetdYAML).
func writeFleetdConfig(p paths, c fleetdConfig) error {
	classes, err := os.ReadFile(filepath.Join(c.opts.Root, "examples", "classes.json"))
	if err != nil {
		return fmt.Errorf("read examples/classes.json from the checkout: %w", err)
	}
	if c.workload == nil {
		if classes, err = outsideTheCluster(classes); err != nil {
			return err
		}
	}
	if err := os.WriteFile(p.classes, classes, 0o644); err != nil {
		return fmt.Errorf("write classes.json: %w", err)
	}
	if err := learnBootPolicy(p, c.opts.FleetdBinary); err != nil {
		return err
	}
	return writeFleetdYAML(p, c)
}

// outsideTheCluster sets joins_kubernetes false on every talos class of classes.json: without
// Options.WorkloadCluster the development stack runs no workload cluster for its simulated
// Talos boots to join, so they go active at delivery, as before classes joined Kubernetes.
func outsideTheCluster(raw []byte) ([]byte, error) {
	var f struct {
		Classes map[string]map[string]any `json:"classes"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("read examples/classes.json: %w", err)
	}
	for _, c := range f.Classes {
		if c["kind"] == "talos" && c["installable"] != false {
			c["joins_kubernetes"] = false
		}
	}
	return json.MarshalIndent(f, "", "  ")
}

// writeFleetdYAML writes fleetd.yaml from c, every path absolute, then loads it as `fleetd serve`
// will, so a mistake is reported here with fleetd's own words.
func writeFleetdYAML(p paths, c fleetdConfig) error {
	public, err := url.Parse(c.fleetdURL)
	if err != nil {
		return fmt.Errorf("write fleetd.yaml: fleetd URL %q: %w", c.fleetdURL, err)
	}
	plain, err := url.Parse(c.httpURL)
	if err != nil {
		return fmt.Errorf("write fleetd.yaml: fleetd URL %q: %w", c.httpURL, err)
	}
	doc := map[string]any{
		"listen":     map[string]any{"http": plain.Host, "https": public.Host},
		"tls":        map[string]any{"cert": p.fleetdTLSCert, "key": p.fleetdTLSKey},
		"public_url": c.fleetdURL,
		// The emulator serves plain HTTP on loopback: the one development setting fleetd allows
		// it for (config: netbox.plaintext_for_development).
		"netbox": map[string]any{"url": c.netboxURL, "plaintext_for_development": true, "webhook_sources": []string{netboxHost(c.netboxURL)}, "token_file": p.netboxToken,
			"webhook_secret_file": p.webhookSecret, "service_user": ServiceUser, "timeout": c.opts.NetBoxTimeout.String(),
			"seal_keys": []map[string]any{{"id": SealKeyID, "file": p.sealKey}},
			"retries":   c.opts.NetBoxRetries},
		"kubernetes": map[string]any{"kubeconfig": p.kubeconfig, "namespace": c.opts.Namespace,
			"tinkerbell_version": c.opts.Tinkerbell.FleetdSetting()},
		"classes_file":  p.classes,
		"webhooks_file": p.webhooks,
		"attestation": map[string]any{"ek_policy": "hash+cert", "ek_ca_bundle": p.ekBundle,
			"token_key_file": p.tokenKey, "token_lifetime": "10m", "boot_policy_file": p.bootPolicy},
		"pki": map[string]any{
			"ldevid": map[string]any{"cert": p.ldevidCert, "key": p.ldevidKey, "lifetime": cmp.Or(c.opts.LDevIDLifetime, c.opts.CertLifetime).String()},
			"lak":    map[string]any{"cert": p.lakCert, "key": p.lakKey, "lifetime": c.opts.CertLifetime.String()},
		},
		"config_delivery": map[string]any{"pending_ttl": "4h"},
		"talos": map[string]any{"secrets_file": p.talosSecrets, "cluster_name": "fleetsim",
			"endpoint": c.talosEndpoint},
		"seed": map[string]any{"gateway": c.gatewayAddr.String(), "dns": []string{c.gatewayAddr.String()},
			"endpoints": map[string]string{"fleetd": c.fleetdURL, "netbox": c.netboxURL}},
		"kea":       map[string]any{"reservations_file": p.keaReservations, "subnet": "127.0.0.0/8"},
		"operator":  map[string]any{"token_file": p.operatorToken},
		"metrics":   map[string]any{"token_file": p.metricsToken},
		"reconcile": map[string]any{"interval": c.opts.ReconcileInterval.String()},
		"log":       map[string]any{"level": c.opts.LogLevel, "format": "json"},
	}
	if c.workload != nil {
		doc["cluster"] = c.workload.clusterSection()
	}
	if w := c.opts.InventoryBootCheckWindow; w != 0 {
		doc["inventory"] = map[string]any{"boot_check_window": w.String()}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode fleetd.yaml: %w", err)
	}
	head := "# fleetd.yaml of the development stack, written by fleetsim on every start.\n"
	if err := os.WriteFile(p.fleetdConfig, append([]byte(head), b...), 0o644); err != nil {
		return fmt.Errorf("write fleetd.yaml: %w", err)
	}
	if _, err := config.Load(p.fleetdConfig); err != nil {
		return fmt.Errorf("check the stack's fleetd.yaml: %w", err)
	}
	return nil
}

// netboxHost is the address of the emulator's URL: the source of its webhooks, which it sends
// from the same loopback address it serves on.
func netboxHost(netboxURL string) string {
	u, err := url.Parse(netboxURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// learnBootPolicy writes the stack's boot policy as an operator does (docs/security.md): the
// real `fleetd policy learn` from a known-good netboot's event log, which for the simulated
// machines is the recorded boot their swtpm replays at every power-on (machinefs.go). A machine
// netbooted with another log (`--event-log`) is then refused as boot_policy.
func learnBootPolicy(p paths, fleetd string) error {
	logFile := filepath.Join(p.dir, "hookos-event-log")
	if err := os.WriteFile(logFile, eventlogs.RHEL8SecureBoot, 0o644); err != nil {
		return fmt.Errorf("write the netboot's event log: %w", err)
	}
	out, err := exec.Command(fleetd, "policy", "learn", "--policy", p.bootPolicy, "--event-log", logFile,
		"--name", "fleetsim HookOS (the recorded RHEL 8 boot)").CombinedOutput()
	if err != nil {
		return fmt.Errorf("fleetd policy learn: %w: %s", err, out)
	}
	return nil
}

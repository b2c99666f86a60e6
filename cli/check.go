package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/workflows"
)

const checkUsage = `usage: fleetd check [--config FILE] [--classes FILE] [--webhooks FILE] [--boot-policy FILE] [--templates DIR] [--skip-files]

Validates the config and the files it names (classes.json, netbox-webhooks.yaml, the boot policy)
without starting anything, as fleetd serve would at its start, and with --templates the site's
Tinkerbell Templates. Exit status 0 when all are right, 1 with every problem listed.`

// Check validates a config and the files it names without starting anything (docs/design.md §7), so the
// infrastructure repo's CI can run it on every change. It prints every problem and exits 1 when
// there is one.
func Check(args []string, stdout, stderr io.Writer) int {
	fs := NewFlagSet("check", checkUsage)
	cfgPath := fs.String("config", "fleetd.yaml", "the config file")
	var files checkedFiles
	fs.StringVar(&files.classes, "classes", "", "classes.json to check (default: the config's classes_file)")
	fs.StringVar(&files.webhooks, "webhooks", "", "netbox-webhooks.yaml to check (default: the config's webhooks_file)")
	fs.StringVar(&files.bootPolicy, "boot-policy", "", "the boot policy to check (default: the config's attestation.boot_policy_file; with --skip-files only when it exists)")
	fs.StringVar(&files.templates, "templates", "", "a directory of the Tinkerbell Template manifests the classes name, to check as fleetd checks them for a request (default: none)")
	skipFiles := fs.Bool("skip-files", false, "do not require the secret and CA files the config names to exist (CI of the infrastructure repo)")
	pos, code, ok := Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := NoArgs(fs, pos, stderr); !ok {
		return code
	}
	var p problems
	cfg, err := config.Load(*cfgPath, config.Override{SkipFiles: *skipFiles})
	if err != nil {
		p.add(*cfgPath, errors.Unwrap(err))
	}
	files.defaults(cfg)
	catalog := files.checkClasses(&p, stdout)
	if catalog != nil && cfg != nil {
		if err := CheckJoiningClasses(*catalog, cfg.Cluster.Kubeconfig); err != nil {
			p.add(*cfgPath, err)
		}
	}
	// A missing policy file is the config's problem (reported above unless --skip-files).
	if _, err := os.Stat(files.bootPolicy); files.bootPolicy != "" && (files.explicitPolicy || err == nil) {
		if err := checkBootPolicy(files.bootPolicy, catalog); err != nil {
			p.add(files.bootPolicy, err)
		}
	}
	if files.templates != "" && catalog != nil {
		fleetdURL := "https://fleetd.invalid:8443" // a request renders fleetd's public_url; any URL renders alike
		if cfg != nil && cfg.PublicURL != "" {
			fleetdURL = cfg.PublicURL
		}
		// The Templates are checked for the Tinkerbell the config names (config.Load has
		// validated it), or for the default one when the config did not load.
		version := workflows.DefaultVersion
		if cfg != nil {
			v, err := workflows.ParseVersion(cfg.Kubernetes.TinkerbellVersion)
			if err != nil {
				p.add(*cfgPath, err)
			} else {
				version = v
			}
		}
		found, err := checkTemplates(version, files.templates, *catalog, fleetdURL)
		if err != nil {
			p.add(files.templates, err)
		}
		for _, line := range found {
			p = append(p, files.templates+": "+line)
		}
	}
	if files.webhooks != "" {
		if err := checkWebhooks(files.webhooks); err != nil {
			p.add(files.webhooks, err)
		}
	}
	if len(p) > 0 {
		fmt.Fprintf(stderr, "fleetd check: %d problem(s):\n", len(p))
		for _, line := range p {
			fmt.Fprintln(stderr, "  "+line)
		}
		return 1
	}
	fmt.Fprintln(stdout, "fleetd check: ok")
	return 0
}

// problems are fleetd check's findings, one line each, prefixed with the file they are in.
type problems []string

func (p *problems) add(what string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		*p = append(*p, what+": "+line)
	}
}

// checkedFiles are the files fleetd check reads besides the config: named by a flag, or else by
// the config.
type checkedFiles struct {
	classes, webhooks, bootPolicy string
	templates                     string // --templates: the Template manifests' directory
	explicitPolicy                bool   // --boot-policy was given: the file must exist
}

func (f *checkedFiles) defaults(cfg *config.Config) {
	f.explicitPolicy = f.bootPolicy != ""
	if cfg == nil {
		return
	}
	if f.classes == "" {
		f.classes = cfg.Path(cfg.ClassesFile)
	}
	if f.webhooks == "" && cfg.Webhooks != "" {
		f.webhooks = cfg.Path(cfg.Webhooks)
	}
	if !f.explicitPolicy && cfg.Attestation.BootPolicyFile != "" {
		f.bootPolicy = cfg.Path(cfg.Attestation.BootPolicyFile)
	}
}

// checkClasses loads classes.json and runs cloud-init over its cloud-init classes; it returns the
// catalog the boot policy is checked against (nil when classes.json is unreadable or wrong).
func (f *checkedFiles) checkClasses(p *problems, stdout io.Writer) *fleet.Catalog {
	if f.classes == "" {
		return nil
	}
	var catalog *fleet.Catalog
	cat, err := LoadCatalog(f.classes)
	if err != nil {
		p.add(f.classes, err)
	} else {
		catalog = &cat
	}
	refused, notes := CheckCloudInit(cat)
	for _, r := range refused {
		*p = append(*p, f.classes+": "+r)
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, "fleetd check: note: "+n)
	}
	return catalog
}

// checkBootPolicy validates the boot policy, against the catalogue when it loaded.
func checkBootPolicy(path string, catalog *fleet.Catalog) error {
	if catalog != nil {
		_, err := LoadBootPolicy(path, *catalog)
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = attest.ParseBootPolicy(b)
	return err
}

func checkWebhooks(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	schema, err := netbox.LoadSchema(f)
	if err != nil {
		return err
	}
	if problems := handlers.WebhookPathProblems(schema.WebhookPaths()); len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// CheckJoiningClasses refuses a catalogue whose classes join Kubernetes when fleetd has no
// workload cluster (cluster.kubeconfig unset): their nodes could not join, and every attestation
// of one would fail. fleetd serve refuses to start on it, fleetd check reports it.
func CheckJoiningClasses(cat fleet.Catalog, kubeconfig string) error {
	if kubeconfig != "" {
		return nil
	}
	var joining []string
	for _, n := range cat.Names() {
		if c, _ := cat.Class(n); c.JoinsKubernetes && c.Installable {
			joining = append(joining, n)
		}
	}
	if len(joining) == 0 {
		return nil
	}
	return fmt.Errorf("classes %s join Kubernetes (joins_kubernetes, true by default for talos) but cluster.kubeconfig is not set: give fleetd's kubeconfig of the workload cluster (docs/operate.md, \"The workload cluster\"), or set joins_kubernetes false on them",
		strings.Join(joining, ", "))
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/cloudinit"
	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/netbox"
)

// check validates a config and the files it names without starting anything (docs/design.md §7), so the
// infrastructure repo's CI can run it on every change. It prints every problem and exits 1 when
// there is one.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "fleetd.yaml", "the config file")
	var files checkedFiles
	fs.StringVar(&files.classes, "classes", "", "classes.json to check (default: the config's classes_file)")
	fs.StringVar(&files.webhooks, "webhooks", "", "netbox-webhooks.yaml to check (default: the config's webhooks_file)")
	fs.StringVar(&files.bootPolicy, "boot-policy", "", "the boot policy to check (default: the config's attestation.boot_policy_file; with --skip-files only when it exists)")
	fs.StringVar(&files.templates, "templates", "", "a directory of the Tinkerbell Template manifests the classes name, to check as fleetd checks them for a request (default: none)")
	skipFiles := fs.Bool("skip-files", false, "do not require the secret and CA files the config names to exist (CI of the infrastructure repo)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var p problems
	cfg, err := config.Load(*cfgPath, config.Override{SkipFiles: *skipFiles})
	if err != nil {
		p.add(*cfgPath, errors.Unwrap(err))
	}
	files.defaults(cfg)
	catalog := files.checkClasses(&p, stdout)
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
		found, err := checkTemplates(files.templates, *catalog, fleetdURL)
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
	cat, err := loadCatalog(f.classes)
	if err != nil {
		p.add(f.classes, err)
	} else {
		catalog = &cat
	}
	refused, notes := checkCloudInit(cat)
	for _, r := range refused {
		*p = append(*p, f.classes+": "+r)
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, "fleetd check: note: "+n)
	}
	return catalog
}

// checkCloudInit runs the real `cloud-init schema` over the user-data of every cloud-init-nocloud
// class, so that a class the node's cloud-init would refuse fails here (and at fleetd serve's
// start: the NixOS module puts cloud-init on the unit's path) rather than on the node's first
// boot, after its disk was erased. It returns one line per refusal, and notes for what it could
// not check (cloud-init not installed, user-data that is not #cloud-config), which are not
// problems of the files.
func checkCloudInit(cat fleet.Catalog) (problems, notes []string) {
	for _, name := range cat.Names() {
		c, _ := cat.Class(name)
		if c.Kind != fleet.KindCloudInit || c.CloudInit == nil {
			continue
		}
		if !cloudinit.IsCloudConfig(c.CloudInit.UserData) {
			notes = append(notes, fmt.Sprintf("class %q's user-data is not #cloud-config; cloud-init schema checks only #cloud-config", name))
			continue
		}
		err := cloudinit.Schema(context.Background(), []byte(c.CloudInit.UserData))
		var refused *cloudinit.SchemaError
		switch {
		case errors.Is(err, cloudinit.ErrNotInstalled):
			notes = append(notes, fmt.Sprintf("cloud-init is not installed here, so class %q's user-data was NOT validated (install cloud-init, or run fleetd check where it is)", name))
		case errors.As(err, &refused):
			problems = append(problems, fmt.Sprintf("class %q: cloud_init.user_data is refused by cloud-init: %s", name, refused.Output))
		case err != nil:
			problems = append(problems, fmt.Sprintf("class %q: cloud_init.user_data could not be checked: %v", name, err))
		}
	}
	return problems, notes
}

func loadCatalog(path string) (fleet.Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Catalog{}, err
	}
	defer f.Close()
	return fleet.LoadCatalog(f)
}

// checkBootPolicy validates the boot policy, against the catalogue when it loaded.
func checkBootPolicy(path string, catalog *fleet.Catalog) error {
	if catalog != nil {
		_, err := loadBootPolicy(path, *catalog)
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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
	classes := fs.String("classes", "", "classes.json to check (default: the config's classes_file)")
	webhooks := fs.String("webhooks", "", "netbox-webhooks.yaml to check (default: the config's webhooks_file)")
	skipFiles := fs.Bool("skip-files", false, "do not require the secret and CA files the config names to exist (CI of the infrastructure repo)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var problems []string
	add := func(what string, err error) {
		for _, line := range strings.Split(err.Error(), "\n") {
			problems = append(problems, what+": "+line)
		}
	}
	cfg, err := config.Load(*cfgPath, config.Override{SkipFiles: *skipFiles})
	if err != nil {
		add(*cfgPath, errors.Unwrap(err))
	}
	if *classes == "" && cfg != nil {
		*classes = cfg.Path(cfg.ClassesFile)
	}
	if *webhooks == "" && cfg != nil && cfg.Webhooks != "" {
		*webhooks = cfg.Path(cfg.Webhooks)
	}
	if *classes != "" {
		if _, err := loadCatalog(*classes); err != nil {
			add(*classes, err)
		}
	}
	if *webhooks != "" {
		if err := checkWebhooks(*webhooks); err != nil {
			add(*webhooks, err)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "fleetd check: %d problem(s):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return 1
	}
	fmt.Fprintln(stdout, "fleetd check: ok")
	return 0
}

func loadCatalog(path string) (fleet.Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Catalog{}, err
	}
	defer f.Close()
	return fleet.LoadCatalog(f)
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

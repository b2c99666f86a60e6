package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// checkTemplates checks the Templates the infrastructure repo applies to Tinkerbell (the *.yaml
// and *.yml manifests in dir; one or more documents each, those of kind Template read) against
// classes.json: every Template an installable class names for an action must be there, render
// for a request as fleetd renders it, and pass fleetd's Template checks for that action and class
// kind (workflows.CheckTemplate and CheckFetchSecret, which refuse a request, and
// CheckWipeReceipt, whose absence leaves every wipe of the class unconfirmed; docs/operate.md,
// "The wipe receipt step"), all as for the Tinkerbell version v the site runs
// (kubernetes.tinkerbell_version: its controller's template functions and data, and the shared
// directory its worker needs declared). It returns one line per problem, naming the classes it is
// found for.
func checkTemplates(v workflows.Version, dir string, cat fleet.Catalog, fleetdURL string) ([]string, error) {
	tpls, err := loadTemplateDir(dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	classes := map[string][]string{} // problem -> the classes it is found for
	add := func(class, problem string) {
		if classes[problem] == nil {
			problems = append(problems, problem)
		}
		classes[problem] = append(classes[problem], fmt.Sprintf("%q", class))
	}
	for _, name := range cat.Names() {
		class, _ := cat.Class(name)
		if !class.Installable {
			continue
		}
		for _, action := range []fleet.Action{fleet.ActionProvision, fleet.ActionAttest, fleet.ActionWipe, fleet.ActionRetire} {
			tname := class.Templates[action]
			if tname == "" {
				continue // classes.json's own check names a missing Template name
			}
			tpl, ok := tpls[tname]
			if !ok {
				add(name, fmt.Sprintf("its %s Template %s is not in %s", action, tname, dir))
				continue
			}
			if err := checkTemplateFor(v, tpl, class, action, fleetdURL); err != nil {
				add(name, fmt.Sprintf("%s: %v", action, err))
			}
		}
	}
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = fmt.Sprintf("class %s: %s", strings.Join(classes[p], ", "), p)
	}
	return out, nil
}

// checkTemplateFor renders a Template for a request of class and action on a stand-in device
// (the hardwareMap fleetd gives a Workflow, workflows.HardwareMap) as Tinkerbell version v's
// controller renders it, and applies the checks.
func checkTemplateFor(v workflows.Version, tpl *tinkv1.Template, class fleet.Class, action fleet.Action, fleetdURL string) error {
	d := fleet.Device{ID: 1, Name: "fleetd-check", MACs: []fleet.MAC{"02:00:00:00:00:01"},
		Address: netip.MustParsePrefix("192.0.2.10/24"), Declared: fleet.Declaration{Class: class.Name, DiskSerial: "FLEETD-CHECK-DISK"}}
	request := string(action) + "-fleetdck"
	hm := workflows.HardwareMap(fleet.WorkflowSpec{Name: fleet.WorkflowName(d.Name, request), Template: tpl.Name, Device: d, Class: class,
		Action: action, Request: request, FleetdURL: fleetdURL})
	r, err := workflows.RenderTemplate(v, *tpl.Spec.Data, hm, nil)
	if err != nil {
		return fmt.Errorf("Template %s does not render as Tinkerbell %s would render it: %w", tpl.Name, v, err)
	}
	return errors.Join(workflows.CheckTemplate(v, tpl.Name, r, hm), workflows.CheckFetchSecret(tpl.Name, r, action, class.Kind),
		workflows.CheckWipeReceipt(tpl.Name, r, action))
}

// loadTemplateDir reads the Template manifests of dir by name.
func loadTemplateDir(dir string) (map[string]*tinkv1.Template, error) {
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	out := map[string]*tinkv1.Template{}
	for _, f := range files {
		if err := readTemplates(f, out); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Template manifest (kind: Template) in %s", dir)
	}
	return out, nil
}

// readTemplates adds the Templates of one manifest file to out; documents of other kinds are
// skipped, and a Template named twice is refused.
func readTemplates(file string, out map[string]*tinkv1.Template) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	docs := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for n := 1; ; n++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", file, n, err)
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			return fmt.Errorf("%s: document %d: %w", file, n, err)
		}
		if strings.TrimSpace(kind.Kind) != "Template" {
			continue
		}
		t := &tinkv1.Template{}
		if err := yaml.UnmarshalStrict(doc, t); err != nil {
			return fmt.Errorf("%s: document %d: %w", file, n, err)
		}
		if t.Name == "" || t.Spec.Data == nil {
			return fmt.Errorf("%s: document %d: a Template needs metadata.name and spec.data", file, n)
		}
		if _, twice := out[t.Name]; twice {
			return fmt.Errorf("%s: Template %s is defined twice in the directory", file, t.Name)
		}
		out[t.Name] = t
	}
}

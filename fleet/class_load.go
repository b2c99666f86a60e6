package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Loading classes.json (docs/design.md §1; the file is the infrastructure repo's, trusted as the
// owner's word): decoded strictly and validated as a whole, every problem named by class and key.

// classesFile is the JSON shape of classes.json.
type classesFile struct {
	Classes map[string]classJSON `json:"classes"`
}

type classJSON struct {
	Kind        Kind              `json:"kind"`
	Installable *bool             `json:"installable"`
	Reason      string            `json:"reason"`
	Templates   map[string]string `json:"templates"`
	Image       string            `json:"image"`
	Profile     string            `json:"profile"`
	SecureBoot  SecureBoot        `json:"secure_boot"`
	Netboot     *struct {
		ToggleAllowNetboot *bool  `json:"toggle_allow_netboot"`
		BootMode           string `json:"boot_mode"`
		ISOURL             string `json:"iso_url"`
	} `json:"netboot"`
	Timeout         string `json:"workflow_timeout"`
	JoinsKubernetes *bool  `json:"joins_kubernetes"`
	Talos           *struct {
		MachineType string            `json:"machine_type"`
		Patches     []json.RawMessage `json:"patches"`
	} `json:"talos"`
	CloudInit *struct {
		UserData string `json:"user_data"`
	} `json:"cloud_init"`
}

var classNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// DefaultWorkflowTimeout is a class's Workflow timeout when classes.json sets none.
const DefaultWorkflowTimeout = time.Hour

// LoadCatalog decodes classes.json strictly (unknown keys are errors) and validates it as a
// whole: the returned error lists every problem, one per line, each naming the class and key.
func LoadCatalog(r io.Reader) (Catalog, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return Catalog{}, fmt.Errorf("read classes: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f classesFile
	if err := dec.Decode(&f); err != nil {
		return Catalog{}, fmt.Errorf("decode classes: %w", err)
	}
	if dec.More() {
		return Catalog{}, errors.New("decode classes: trailing data after the JSON object")
	}
	if len(f.Classes) == 0 {
		return Catalog{}, errors.New(`classes: "classes" is empty: declare at least one class`)
	}
	var problems []error
	cat := Catalog{classes: make(map[string]Class, len(f.Classes))}
	for _, name := range sortedKeys(f.Classes) {
		c, errs := f.Classes[name].class(name)
		problems = append(problems, errs...)
		cat.classes[name] = c
	}
	if len(problems) > 0 {
		return Catalog{}, errors.Join(problems...)
	}
	return cat, nil
}

func (j classJSON) class(name string) (Class, []error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("class %q: "+format, append([]any{name}, args...)...))
	}
	if !classNameRE.MatchString(name) {
		bad("name must be lowercase letters, digits and '-' (at most 63)")
	}
	c := Class{Name: name, Kind: j.Kind, Installable: true, Reason: j.Reason, Image: j.Image,
		Profile: j.Profile, SecureBoot: j.SecureBoot, Templates: map[Action]string{}, Timeout: DefaultWorkflowTimeout}
	if j.Installable != nil {
		c.Installable = *j.Installable
	}
	switch j.Kind {
	case KindTalos, KindNixOS, KindAlpine, KindCloudInit:
	case "":
		bad(`"kind" is missing: use one of %s`, kindList())
	default:
		bad(`"kind" %q is unknown: use one of %s`, j.Kind, kindList())
	}
	if !c.Installable {
		if strings.TrimSpace(j.Reason) == "" {
			bad(`"installable" is false but "reason" is empty: say why devices of this class cannot be installed`)
		}
		return c, errs
	}
	c.Templates = j.templates(bad)
	if j.Image == "" {
		bad(`"image" is missing: the install Template needs the OS image URL`)
	}
	switch j.SecureBoot {
	case SecureBootRequired, SecureBootAny:
	case "":
		c.SecureBoot = SecureBootRequired
	default:
		bad(`"secure_boot" %q is unknown: use "required" or "any"`, j.SecureBoot)
	}
	c.Netboot = j.netboot(bad)
	if j.Timeout != "" {
		c.Timeout = j.timeout(bad)
	}
	errs = append(errs, c.kindConfig(j)...)
	return c, errs
}

// templates reads "templates": a valid Template name for every action.
func (j classJSON) templates(bad func(string, ...any)) map[Action]string {
	out := map[Action]string{}
	for key, tpl := range j.Templates {
		a := Action(key)
		if !validAction(a) {
			bad(`"templates" has unknown action %q: use provision, attest, wipe, retire`, key)
			continue
		}
		if !classNameRE.MatchString(tpl) {
			bad(`template %q for %s is not a valid Kubernetes object name`, tpl, key)
		}
		out[a] = tpl
	}
	for _, a := range Actions {
		if out[a] == "" {
			bad(`"templates" names no Template for %s`, a)
		}
	}
	return out
}

// netboot reads "netboot": allowNetboot toggled unless it says not, and a boot mode Tinkerbell has.
func (j classJSON) netboot(bad func(string, ...any)) Netboot {
	if j.Netboot == nil {
		return Netboot{ToggleAllowNetboot: true}
	}
	nb := Netboot{ToggleAllowNetboot: true, BootMode: j.Netboot.BootMode, ISOURL: j.Netboot.ISOURL}
	if j.Netboot.ToggleAllowNetboot != nil {
		nb.ToggleAllowNetboot = *j.Netboot.ToggleAllowNetboot
	}
	switch j.Netboot.BootMode {
	case "", "netboot":
	case "iso":
		if j.Netboot.ISOURL == "" {
			bad(`"netboot.boot_mode" is "iso" but "netboot.iso_url" is empty`)
		}
	default:
		bad(`"netboot.boot_mode" %q is unknown: use "netboot" or "iso"`, j.Netboot.BootMode)
	}
	return nb
}

// timeout reads "workflow_timeout": a duration of at least a minute (DefaultWorkflowTimeout when
// it is wrong, with the problem reported).
func (j classJSON) timeout(bad func(string, ...any)) time.Duration {
	d, err := time.ParseDuration(j.Timeout)
	switch {
	case err != nil:
		bad(`"workflow_timeout" %q is not a duration such as "45m"`, j.Timeout)
	case d < time.Minute:
		bad(`"workflow_timeout" %s is shorter than a minute: Tinkerbell would time the Workflow out at once`, d)
	default:
		return d
	}
	return DefaultWorkflowTimeout
}

// kindConfig validates the block that belongs to the class's kind and rejects blocks of others.
func (c *Class) kindConfig(j classJSON) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("class %q: "+format, append([]any{c.Name}, args...)...))
	}
	if j.Talos != nil && c.Kind != KindTalos {
		bad(`has a "talos" block but its kind is %s`, c.Kind)
	}
	if j.CloudInit != nil && c.Kind != KindCloudInit {
		bad(`has a "cloud_init" block but its kind is %s`, c.Kind)
	}
	if j.JoinsKubernetes != nil && *j.JoinsKubernetes && c.Kind != KindTalos {
		bad(`"joins_kubernetes" is true but its kind is %s: only a talos configuration carries the node's own bootstrap token; set it false or leave it out`, c.Kind)
	}
	switch c.Kind {
	case KindTalos:
		c.JoinsKubernetes = j.JoinsKubernetes == nil || *j.JoinsKubernetes
		if j.Talos == nil {
			bad(`kind talos needs a "talos" block with "machine_type"`)
			break
		}
		if j.Talos.MachineType != "controlplane" && j.Talos.MachineType != "worker" {
			bad(`"talos.machine_type" %q is unknown: use "controlplane" or "worker"`, j.Talos.MachineType)
		}
		for i, p := range j.Talos.Patches {
			if len(bytes.TrimSpace(p)) == 0 || bytes.TrimSpace(p)[0] != '{' {
				bad(`"talos.patches[%d]" must be a JSON object (a strategic merge patch)`, i)
			}
		}
		c.Talos = &TalosClass{MachineType: j.Talos.MachineType, Patches: j.Talos.Patches}
	case KindNixOS, KindAlpine:
		if j.Profile == "" {
			bad(`kind %s needs "profile": the configuration the node switches into`, c.Kind)
		}
	case KindCloudInit:
		if j.CloudInit == nil || strings.TrimSpace(j.CloudInit.UserData) == "" {
			bad(`kind cloud-init-nocloud needs "cloud_init.user_data"`)
			break
		}
		c.CloudInit = &CloudInitClass{UserData: j.CloudInit.UserData}
	}
	return errs
}

func validAction(a Action) bool {
	for _, x := range Actions {
		if a == x {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

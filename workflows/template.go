package workflows

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/distribution/reference"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// Rendered is a Template rendered for one Workflow: what the controller writes into status when
// it first sees the Workflow (every action pending).
type Rendered struct {
	Name          string
	GlobalTimeout int64 // seconds
	Tasks         []tinkv1.Task
}

// RenderTemplate renders a Template's spec.data the way the controller of Tinkerbell version v
// does, with hardwareMap and hw (the Hardware object as JSON, as fleetd writes it; nil for none):
// Go text/template with missingkey=error, every hardwareMap key as a top-level variable and
// .Hardware (Disks, Interfaces, UserData, Metadata, VendorData) from hw; then the YAML is decoded
// and validated (names 1-199 characters and unique, at least one task, image references that
// parse, a non-empty worker). The versions differ (renderers):
//   - v0.25 (tinkerbell/tinkerbell's tink/controller/internal/workflow/template_funcs.go and
//     reconciler.go): sprig's hermetic functions only (no env, now, random or other
//     non-repeatable ones) with formatPartition, netmaskToPrefixLength, toYaml and fromYaml, the
//     output capped at 256 KiB, and two more keys: .hardware (the Hardware object by its JSON
//     names) and .references (the Hardware's spec.references the controller's rules allow; fleetd
//     cannot know those rules, so it renders with none, as the controller's default, which denies
//     every reference);
//   - v0.12 (tink v0.12.2's internal/deprecated/workflow/template_validator.go, types.go,
//     template_funcs.go): sprig's whole function set and its own formatPartition.
//
// Trust: data is the infrastructure repo's Template, hardwareMap and hw are fleetd's own; the
// result is checked again by CheckTemplate before fleetd relies on it.
func RenderTemplate(v Version, data string, hardwareMap map[string]string, hw map[string]any) (Rendered, error) {
	r, ok := renderers[v]
	if !ok {
		return Rendered{}, fmt.Errorf("render template: Tinkerbell version %q is not one fleetd knows (%s)", v, knownVersions())
	}
	t, err := parseTemplate(v, r, data)
	if err != nil {
		return Rendered{}, fmt.Errorf("parse template: %w", err)
	}
	vars := make(map[string]any, len(hardwareMap)+3)
	for k, val := range hardwareMap {
		vars[k] = val
	}
	if r.hardwareKeys {
		if hw == nil {
			hw = map[string]any{}
		}
		vars["hardware"] = hw
		vars["references"] = map[string]any{}
	}
	vars["Hardware"] = templateHardware(hw)
	out := &cappedBuffer{limit: r.maxOutput}
	if err := t.Execute(out, vars); err != nil {
		return Rendered{}, fmt.Errorf("execute template: %w", err)
	}
	var doc templateDoc
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		return Rendered{}, fmt.Errorf("decode rendered YAML: %w", err)
	}
	if err := doc.validate(); err != nil {
		return Rendered{}, err
	}
	return doc.rendered(), nil
}

// renderer is how one Tinkerbell version's controller renders a Template.
type renderer struct {
	funcs        template.FuncMap
	hardwareKeys bool // the hardware and references keys
	maxOutput    int  // 0: no cap
}

// renderers are the Tinkerbell versions fleetd renders for. Their function maps are built once:
// sprig builds a new map of about 200 functions on every call.
var renderers = map[Version]renderer{
	TinkerbellV025: {funcs: v025Funcs(), hardwareKeys: true, maxOutput: 256 * 1024},
	TinkerbellV012: {funcs: v012Funcs()},
}

// v025Funcs is v0.25's safeFuncMap: sprig's hermetic functions and its own four.
func v025Funcs() template.FuncMap {
	fm := sprig.HermeticTxtFuncMap()
	fm["formatPartition"] = formatPartitionV025
	fm["netmaskToPrefixLength"] = netmaskToPrefixLength
	fm["toYaml"] = toYaml
	fm["fromYaml"] = fromYaml
	return fm
}

// v012Funcs is tink v0.12.2's function map: sprig's whole set and its formatPartition.
func v012Funcs() template.FuncMap {
	fm := sprig.TxtFuncMap()
	fm["formatPartition"] = formatPartitionV012
	return fm
}

// cappedBuffer is v0.25's limitedWriter: a write that would pass limit (when not 0) fails with
// the controller's words.
type cappedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.limit > 0 && b.Len()+len(p) > b.limit {
		return 0, fmt.Errorf("rendered template exceeds %d bytes", b.limit)
	}
	return b.Buffer.Write(p)
}

// parsed holds the Templates last parsed, by version and text: a storm of provisions renders the
// same few Templates hundreds of times, and parsing one with sprig's functions was 6% of fleetd's
// CPU in it (docs/performance.md). A Template is still read from the API server for every
// Workflow, so a changed Template is a new text and parsed again. A parsed text/template is safe
// for concurrent Execute. At most parsedMax texts are kept; a full cache is emptied, which costs
// only parsing again (a fleet has a Template per class and action).
var parsed = struct {
	sync.Mutex
	m map[parsedKey]*template.Template
}{m: map[parsedKey]*template.Template{}}

type parsedKey struct {
	version Version
	text    string
}

const parsedMax = 32

// parseTemplate parses a Template's text as the version's controller does, or returns it parsed
// before. A text that does not parse is not kept.
func parseTemplate(v Version, r renderer, data string) (*template.Template, error) {
	key := parsedKey{version: v, text: data}
	parsed.Lock()
	t, ok := parsed.m[key]
	parsed.Unlock()
	if ok {
		return t, nil
	}
	t, err := template.New("workflow-template").Option("missingkey=error").Funcs(r.funcs).Parse(data)
	if err != nil {
		return nil, err
	}
	parsed.Lock()
	defer parsed.Unlock()
	if len(parsed.m) >= parsedMax {
		clear(parsed.m)
	}
	parsed.m[key] = t
	return t, nil
}

// templateDoc is the YAML a Template renders to (tink's workflow.Workflow). id, on-timeout and
// on-failure are accepted and dropped, as tink does.
type templateDoc struct {
	Version       string `yaml:"version"`
	Name          string `yaml:"name"`
	GlobalTimeout int64  `yaml:"global_timeout"`
	Tasks         []struct {
		Name        string            `yaml:"name"`
		Worker      string            `yaml:"worker"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		Actions     []struct {
			Name        string            `yaml:"name"`
			Image       string            `yaml:"image"`
			Timeout     int64             `yaml:"timeout"`
			Command     []string          `yaml:"command"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
			Pid         string            `yaml:"pid"`
		} `yaml:"actions"`
	} `yaml:"tasks"`
}

func (d templateDoc) validate() error {
	if !validLength(d.Name) {
		return fmt.Errorf("validate template: name %q must have 1 to 199 characters", d.Name)
	}
	if len(d.Tasks) == 0 {
		return errors.New("validate template: it defines no task")
	}
	tasks := map[string]bool{}
	for _, task := range d.Tasks {
		if !validLength(task.Name) || tasks[task.Name] {
			return fmt.Errorf("validate template: task name %q is empty, too long or repeated", task.Name)
		}
		tasks[task.Name] = true
		if task.Worker == "" {
			return fmt.Errorf("validate template: task %q has an empty worker (use {{.device_1}})", task.Name)
		}
		actions := map[string]bool{}
		for _, a := range task.Actions {
			if !validLength(a.Name) || actions[a.Name] {
				return fmt.Errorf("validate template: action name %q in task %q is empty, too long or repeated", a.Name, task.Name)
			}
			actions[a.Name] = true
			if _, err := reference.ParseNormalizedNamed(a.Image); err != nil {
				return fmt.Errorf("validate template: action %q has image %q that is not a container reference: %w", a.Name, a.Image, err)
			}
		}
	}
	return nil
}

func validLength(s string) bool { return len(s) > 0 && len(s) < 200 }

func (d templateDoc) rendered() Rendered {
	r := Rendered{Name: d.Name, GlobalTimeout: d.GlobalTimeout}
	for _, task := range d.Tasks {
		t := tinkv1.Task{Name: task.Name, WorkerAddr: task.Worker, Volumes: task.Volumes,
			Environment: task.Environment, Actions: []tinkv1.Action{}}
		for _, a := range task.Actions {
			t.Actions = append(t.Actions, tinkv1.Action{Name: a.Name, Image: a.Image, Timeout: a.Timeout,
				Command: a.Command, Volumes: a.Volumes, Environment: a.Environment, Pid: a.Pid,
				Status: tinkv1.WorkflowStatePending})
		}
		r.Tasks = append(r.Tasks, t)
	}
	return r
}

// hardwareData is what a Template sees as .Hardware (both versions' templateHardwareData).
type hardwareData struct {
	Disks      []string
	Interfaces []tinkv1.Interface
	UserData   string
	Metadata   tinkv1.HardwareMetadata
	VendorData string
}

// templateHardware is .Hardware of the Hardware object hw (nil: none), read through tink
// v0.12.2's Go types, whose fields the contract has in both versions; fields it does not know
// are not part of .Hardware.
func templateHardware(hw map[string]any) hardwareData {
	var d hardwareData
	if hw == nil {
		return d
	}
	var typed tinkv1.Hardware
	if runtime.DefaultUnstructuredConverter.FromUnstructured(hw, &typed) != nil {
		return d // the API server validated the object: fleetd's own view of it never fails here
	}
	for _, disk := range typed.Spec.Disks {
		d.Disks = append(d.Disks, disk.Device)
	}
	if len(typed.Spec.Interfaces) > 0 {
		d.Interfaces = typed.Spec.Interfaces
	}
	if typed.Spec.UserData != nil {
		d.UserData = *typed.Spec.UserData
	}
	if typed.Spec.Metadata != nil {
		d.Metadata = *typed.Spec.Metadata
	}
	if typed.Spec.VendorData != nil {
		d.VendorData = *typed.Spec.VendorData
	}
	return d
}

// formatPartitionV012 is tink v0.12.2's template function: the device path of partition n of dev
// for the /dev/nvme*, /dev/sd*, /dev/vd*, /dev/xvd* and /dev/hd* naming schemes; other paths
// unchanged.
func formatPartitionV012(dev string, n int) string {
	switch {
	case strings.HasPrefix(dev, "/dev/nvme"):
		return fmt.Sprintf("%sp%d", dev, n)
	case strings.HasPrefix(dev, "/dev/sd"), strings.HasPrefix(dev, "/dev/vd"),
		strings.HasPrefix(dev, "/dev/xvd"), strings.HasPrefix(dev, "/dev/hd"):
		return fmt.Sprintf("%s%d", dev, n)
	}
	return dev
}

// formatPartitionV025 is v0.25's: never the device alone; "-partN" under /dev/disk/, "pN" after a
// trailing digit (/dev/nvme0n1p1), "N" otherwise (/dev/sda1).
func formatPartitionV025(dev string, n int) string {
	switch {
	case strings.HasPrefix(dev, "/dev/disk/"):
		return fmt.Sprintf("%s-part%d", dev, n)
	case dev != "" && dev[len(dev)-1] >= '0' && dev[len(dev)-1] <= '9':
		return fmt.Sprintf("%sp%d", dev, n)
	}
	return fmt.Sprintf("%s%d", dev, n)
}

// netmaskToPrefixLength is v0.25's: the prefix length of an IPv4 netmask ("255.255.255.0" is
// "24").
func netmaskToPrefixLength(netmask string) (string, error) {
	ip := net.ParseIP(netmask)
	if ip == nil {
		return "", fmt.Errorf("invalid netmask format: %s", netmask)
	}
	v4 := ip.To4()
	if v4 == nil {
		return "", fmt.Errorf("netmask must be IPv4: %s", netmask)
	}
	ones, _ := net.IPMask(v4).Size()
	return strconv.Itoa(ones), nil
}

// toYaml is v0.25's: v as YAML without its final newline.
func toYaml(v any) (string, error) {
	b, err := sigsyaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// fromYaml is v0.25's: a YAML text as a map, list or scalar; an empty text is an error.
func fromYaml(s string) (any, error) {
	if s == "" {
		return nil, errors.New("fromYaml: empty YAML input")
	}
	var out any
	if err := sigsyaml.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("fromYaml: %w", err)
	}
	return out, nil
}

// MergedEnv is an action's environment as the worker passes it to the container (tink-worker
// v0.12.2 and v0.25's server alike): the task's environment with the action's on top.
func MergedEnv(task tinkv1.Task, a tinkv1.Action) map[string]string {
	env := make(map[string]string, len(task.Environment)+len(a.Environment))
	for k, v := range task.Environment {
		env[k] = v
	}
	for k, v := range a.Environment {
		env[k] = v
	}
	return env
}

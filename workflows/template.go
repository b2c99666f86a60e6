package workflows

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/distribution/reference"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"gopkg.in/yaml.v3"
)

// Rendered is a Template rendered for one Workflow: what tink-controller v0.12.2 writes into
// status when it first sees the Workflow (every action STATE_PENDING).
type Rendered struct {
	Name          string
	GlobalTimeout int64 // seconds
	Tasks         []tinkv1.Task
}

// RenderTemplate renders a Template's spec.data the way tink-controller v0.12.2 does
// (internal/deprecated/workflow/template_validator.go, types.go, template_funcs.go): Go text/template
// with sprig and formatPartition, missingkey=error, every hardwareMap key as a top-level variable
// and .Hardware (Disks, Interfaces, UserData, Metadata, VendorData) from hw, which may be nil;
// then the YAML is decoded and validated (names 1-199 characters and unique, at least one task,
// image references that parse, a non-empty worker).
//
// Trust: data is the infrastructure repo's Template, hardwareMap is fleetd's own; the result is
// checked again by CheckTemplate before fleetd relies on it.
func RenderTemplate(data string, hardwareMap map[string]string, hw *tinkv1.Hardware) (Rendered, error) {
	t, err := parseTemplate(data)
	if err != nil {
		return Rendered{}, fmt.Errorf("parse template: %w", err)
	}
	vars := make(map[string]any, len(hardwareMap)+1)
	for k, v := range hardwareMap {
		vars[k] = v
	}
	vars["Hardware"] = templateHardware(hw)
	var buf bytes.Buffer
	if err := t.Execute(&buf, vars); err != nil {
		return Rendered{}, fmt.Errorf("execute template: %w", err)
	}
	var doc templateDoc
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		return Rendered{}, fmt.Errorf("decode rendered YAML: %w", err)
	}
	if err := doc.validate(); err != nil {
		return Rendered{}, err
	}
	return doc.rendered(), nil
}

// parsed holds the Templates last parsed, by their text: a storm of provisions renders the same
// few Templates hundreds of times, and parsing one with sprig's functions was 6% of fleetd's CPU
// in it (docs/performance.md). A Template is still read from the API server for every Workflow,
// so a changed Template is a new text and parsed again. A parsed text/template is safe for
// concurrent Execute. At most parsedMax texts are kept; a full cache is emptied, which costs only
// parsing again (a fleet has a Template per class and action).
var parsed = struct {
	sync.Mutex
	m map[string]*template.Template
}{m: map[string]*template.Template{}}

const parsedMax = 32

// parseTemplate parses a Template's text as tink-controller does, or returns it parsed before.
// A text that does not parse is not kept.
func parseTemplate(data string) (*template.Template, error) {
	parsed.Lock()
	t, ok := parsed.m[data]
	parsed.Unlock()
	if ok {
		return t, nil
	}
	t, err := template.New("workflow-template").Option("missingkey=error").
		Funcs(sprig.TxtFuncMap()).Funcs(template.FuncMap{"formatPartition": formatPartition}).Parse(data)
	if err != nil {
		return nil, err
	}
	parsed.Lock()
	defer parsed.Unlock()
	if len(parsed.m) >= parsedMax {
		clear(parsed.m)
	}
	parsed.m[data] = t
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

// hardwareData is what a Template sees as .Hardware (tink's templateHardwareData).
type hardwareData struct {
	Disks      []string
	Interfaces []tinkv1.Interface
	UserData   string
	Metadata   tinkv1.HardwareMetadata
	VendorData string
}

func templateHardware(hw *tinkv1.Hardware) hardwareData {
	var d hardwareData
	if hw == nil {
		return d
	}
	for _, disk := range hw.Spec.Disks {
		d.Disks = append(d.Disks, disk.Device)
	}
	if len(hw.Spec.Interfaces) > 0 {
		d.Interfaces = hw.Spec.Interfaces
	}
	if hw.Spec.UserData != nil {
		d.UserData = *hw.Spec.UserData
	}
	if hw.Spec.Metadata != nil {
		d.Metadata = *hw.Spec.Metadata
	}
	if hw.Spec.VendorData != nil {
		d.VendorData = *hw.Spec.VendorData
	}
	return d
}

// formatPartition is tink's template function: the device path of partition n of dev for the
// /dev/nvme*, /dev/sd*, /dev/vd*, /dev/xvd* and /dev/hd* naming schemes; other paths unchanged.
func formatPartition(dev string, n int) string {
	switch {
	case strings.HasPrefix(dev, "/dev/nvme"):
		return fmt.Sprintf("%sp%d", dev, n)
	case strings.HasPrefix(dev, "/dev/sd"), strings.HasPrefix(dev, "/dev/vd"),
		strings.HasPrefix(dev, "/dev/xvd"), strings.HasPrefix(dev, "/dev/hd"):
		return fmt.Sprintf("%s%d", dev, n)
	}
	return dev
}

// MergedEnv is an action's environment as tink-worker passes it to the container: the task's
// environment with the action's on top.
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

package netbox

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Schema is the content of netbox-webhooks.yaml (docs/design.md §7): the custom fields, choice sets,
// webhooks and event rules fleetd needs in NetBox. The file is the owner's, read at start and by
// `fleetd check`; LoadSchema trusts nothing in it and lists every problem it finds.
type Schema struct {
	ChoiceSets   []ChoiceSet
	CustomFields []CustomField
	Webhooks     []Webhook
	EventRules   []EventRule
}

// ChoiceSet is a NetBox custom-field choice set (extras.customfieldchoiceset).
type ChoiceSet struct {
	Name        string
	Description string
	Choices     []Choice
}

// Choice is one [value, label] pair of a choice set.
type Choice struct {
	Value string
	Label string
}

// Values lists the choice values in order.
func (c ChoiceSet) Values() []string {
	out := make([]string, len(c.Choices))
	for i, ch := range c.Choices {
		out[i] = ch.Value
	}
	return out
}

// CustomField is a NetBox custom field (extras.customfield).
type CustomField struct {
	Name        string
	Label       string
	Type        string   // one of CustomFieldTypes
	ObjectTypes []string // "app.model", e.g. dcim.device
	ChoiceSet   string   // the choice set's name, for select and multiselect
	GroupName   string
	Weight      int
	Description string
	Required    bool
	Default     any    // JSON value (nil when unset)
	UIVisible   string // always, if-set or hidden
	UIEditable  string // yes, no or hidden; fleetd-written fields are "no"
	// ValidationRegex is matched by NetBox with Python's re.match (anchored at the start).
	ValidationRegex string
}

// Webhook is a NetBox webhook (extras.webhook) aimed at fleetd.
type Webhook struct {
	Name        string
	Description string
	// Path is the part of payload_url after fleetd's base URL; it starts with WebhookPathPrefix.
	Path        string
	HTTPMethod  string
	ContentType string
	// Signed means the webhook carries a secret, so NetBox sends X-Hook-Signature.
	Signed bool
}

// EventRule is a NetBox event rule (extras.eventrule) whose action is one of the webhooks.
type EventRule struct {
	Name        string
	Description string
	ObjectTypes []string
	EventTypes  []string
	Webhook     string // the webhook's name
	Enabled     bool
	Conditions  *Conditions // nil: the rule fires on every event of its types
}

// WebhookPathPrefix starts every webhook path: fleetd serves its webhook intake under it.
const WebhookPathPrefix = "/v1/netbox/webhook"

// CustomFieldTypes are NetBox's custom-field types (extras CustomFieldTypeChoices, 4.6).
var CustomFieldTypes = []string{"text", "longtext", "integer", "decimal", "boolean", "date",
	"datetime", "url", "json", "select", "multiselect", "object", "multiobject"}

// EventTypes are NetBox's built-in event types (core/events.py).
var EventTypes = []string{"object_created", "object_updated", "object_deleted", "job_started",
	"job_completed", "job_failed", "job_errored"}

// WebhookPaths lists the distinct webhook paths, sorted. fleetd's route-agreement test and
// `fleetd check` compare it with the served routes.
func (s Schema) WebhookPaths() []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range s.Webhooks {
		if !seen[w.Path] {
			seen[w.Path] = true
			out = append(out, w.Path)
		}
	}
	sort.Strings(out)
	return out
}

// CustomField returns the named custom field.
func (s Schema) CustomField(name string) (CustomField, bool) {
	for _, f := range s.CustomFields {
		if f.Name == name {
			return f, true
		}
	}
	return CustomField{}, false
}

// ChoiceSet returns the named choice set.
func (s Schema) ChoiceSet(name string) (ChoiceSet, bool) {
	for _, c := range s.ChoiceSets {
		if c.Name == name {
			return c, true
		}
	}
	return ChoiceSet{}, false
}

// Webhook returns the named webhook.
func (s Schema) Webhook(name string) (Webhook, bool) {
	for _, w := range s.Webhooks {
		if w.Name == name {
			return w, true
		}
	}
	return Webhook{}, false
}

// SchemaError lists every problem found in a schema file, one sentence each.
type SchemaError struct {
	Problems []string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("netbox-webhooks.yaml has %d problem(s):\n- %s", len(e.Problems), strings.Join(e.Problems, "\n- "))
}

// The file's shape. Keys follow NetBox's and the OpenTofu provider's names where they exist.
type schemaFile struct {
	ChoiceSets   []choiceSetFile   `json:"choice_sets"`
	CustomFields []customFieldFile `json:"custom_fields"`
	Webhooks     []webhookFile     `json:"webhooks"`
	EventRules   []eventRuleFile   `json:"event_rules"`
}

type choiceSetFile struct {
	Name         string     `json:"name"`
	Description  string     `json:"description"`
	ExtraChoices [][]string `json:"extra_choices"`
}

type customFieldFile struct {
	Name            string          `json:"name"`
	Label           string          `json:"label"`
	Type            string          `json:"type"`
	ObjectTypes     []string        `json:"object_types"`
	ChoiceSet       string          `json:"choice_set"`
	GroupName       string          `json:"group_name"`
	Weight          *int            `json:"weight"`
	Description     string          `json:"description"`
	Required        bool            `json:"required"`
	Default         json.RawMessage `json:"default"`
	UIVisible       string          `json:"ui_visible"`
	UIEditable      string          `json:"ui_editable"`
	ValidationRegex string          `json:"validation_regex"`
}

type webhookFile struct {
	Name            string `json:"name"`
	Description     string `json:"description"`
	Path            string `json:"path"`
	HTTPMethod      string `json:"http_method"`
	HTTPContentType string `json:"http_content_type"`
	Signed          *bool  `json:"signed"`
}

type eventRuleFile struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	ObjectTypes []string        `json:"object_types"`
	EventTypes  []string        `json:"event_types"`
	Webhook     string          `json:"webhook"`
	Enabled     *bool           `json:"enabled"`
	Conditions  json.RawMessage `json:"conditions"`
}

// LoadSchema reads netbox-webhooks.yaml strictly (unknown keys are problems) and validates it
// as a whole: the returned *SchemaError lists every problem, not only the first.
func LoadSchema(r io.Reader) (Schema, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return Schema{}, fmt.Errorf("read netbox-webhooks.yaml: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return Schema{}, fmt.Errorf("parse netbox-webhooks.yaml: %w", err)
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return Schema{}, fmt.Errorf("parse netbox-webhooks.yaml: %w", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return Schema{}, &SchemaError{Problems: []string{"the file must be a mapping with choice_sets, custom_fields, webhooks and event_rules"}}
	}
	problems := unknownKeys(generic, reflect.TypeOf(schemaFile{}), "")
	var f schemaFile
	if err := json.Unmarshal(js, &f); err != nil {
		problems = append(problems, fmt.Sprintf("a value has the wrong type: %v", err))
		return Schema{}, &SchemaError{Problems: problems}
	}
	s, more := f.build()
	problems = append(problems, more...)
	problems = append(problems, s.check()...)
	if len(problems) > 0 {
		return Schema{}, &SchemaError{Problems: problems}
	}
	return s, nil
}

// unknownKeys walks a decoded JSON value against the struct it will be decoded into and names
// every key the struct does not have.
func unknownKeys(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil // the typed decode reports the mismatch
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			fields[name] = t.Field(i).Type
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				out = append(out, fmt.Sprintf("%sunknown key %q", where(path), k))
				continue
			}
			if ft != reflect.TypeOf(json.RawMessage{}) {
				out = append(out, unknownKeys(m[k], ft, path+"."+k)...)
			}
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range list {
			out = append(out, unknownKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

func where(path string) string {
	if path == "" {
		return ""
	}
	return strings.TrimPrefix(path, ".") + ": "
}

package netboxemu

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// Seeding and inspection, the Go API the development stack and tests use. Seeding writes the
// database directly, like a NetBox shell without a request: it fires no webhooks.

// TokenSpec describes an API token to create.
type TokenSpec struct {
	User      string // created when it does not exist yet
	Version   int    // 1 (Token <40 chars>) or 2 (Bearer nbt_<key>.<token>); default 2
	Key       string // v2 key (12 characters); drawn from Config.Rand when empty
	Plaintext string // drawn from Config.Rand when empty
	ReadOnly  bool   // write_enabled false: writes get 403
}

// AddToken creates a token and returns the credential to send after "Token " or "Bearer ":
// the plaintext for v1, "nbt_<key>.<plaintext>" for v2.
func (e *Emulator) AddToken(spec TokenSpec) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if spec.User == "" {
		return "", fmt.Errorf("add token: name its user")
	}
	if spec.Version == 0 {
		spec.Version = 2
	}
	if spec.Version != 1 && spec.Version != 2 {
		return "", fmt.Errorf("add token for %s: version %d is not 1 or 2", spec.User, spec.Version)
	}
	if spec.Plaintext == "" {
		spec.Plaintext = e.randomHex(20)
	}
	if spec.Version == 2 && spec.Key == "" {
		spec.Key = e.randomHex(6)
	}
	u := e.db.userByName(spec.User)
	if u == nil {
		u = &user{id: e.db.next("user"), username: spec.User}
		e.db.users[u.id] = u
	}
	t := &token{id: e.db.next("token"), user: u.id, version: spec.Version, key: spec.Key,
		plaintext: spec.Plaintext, writeEnabled: !spec.ReadOnly}
	e.db.tokens[t.id] = t
	if spec.Version == 1 {
		return t.plaintext, nil
	}
	return "nbt_" + t.key + "." + t.plaintext, nil
}

func (e *Emulator) randomHex(n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(e.cfg.Rand, b); err != nil {
		panic(fmt.Sprintf("netboxemu: read randomness: %v", err))
	}
	return hex.EncodeToString(b)
}

// LoadSchema creates the choice sets, custom fields, webhooks and event rules netbox-webhooks.yaml
// declares, read from the file as the OpenTofu root (deploy/opentofu/main.tf) reads it: decoded
// from YAML, the keys the file leaves out given the root's defaults, keys it does not know
// ignored, and the conditions passed on as written, so that NetBox's rules (EventRule.clean,
// here parseConditions) judge them and nothing of fleetd's own reading of the file does. Each
// webhook's payload_url is fleetdURL + its path; a webhook that is signed (the default) gets
// secret. Like a NetBox shell, it fires no webhook and records no change.
func (e *Emulator) LoadSchema(file []byte, fleetdURL, secret string) error {
	js, err := yaml.YAMLToJSON(file)
	if err != nil {
		return fmt.Errorf("read netbox-webhooks.yaml: %w", err)
	}
	doc, err := decodeJSON(js)
	if err != nil {
		return fmt.Errorf("read netbox-webhooks.yaml: %w", err)
	}
	f := schemaFile{doc: doc}
	choiceSets, fields := f.list("choice_sets"), f.list("custom_fields")
	webhooks, rules := f.list("webhooks"), f.list("event_rules")
	if f.err != nil {
		return f.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Clock().UTC().Truncate(time.Microsecond)
	ids := map[string]int{}
	add := func(what string, item map[string]any, body obj, fn func(obj, time.Time) (int, obj)) error {
		id, errs := fn(body, now)
		if ex := raised(errs); ex != nil {
			return fmt.Errorf("load %s %v into the NetBox emulator: NetBox would answer 500: %v", what, item["name"], ex)
		}
		if errs != nil {
			return fmt.Errorf("load %s %v into the NetBox emulator: %s", what, item["name"], encodeREST(errs))
		}
		ids[fmt.Sprint(what, "/", item["name"])] = id
		return nil
	}
	for _, c := range choiceSets {
		body := obj{{"name", c["name"]}, {"description", f.or(c, "description", "")}, {"extra_choices", c["extra_choices"]}}
		if err := add("choice set", c, body, idOf(e.addChoiceSet)); err != nil {
			return err
		}
	}
	for _, c := range fields {
		body := obj{{"name", c["name"]}, {"label", f.or(c, "label", "")}, {"type", c["type"]},
			{"object_types", c["object_types"]}, {"group_name", f.or(c, "group_name", "")},
			{"weight", f.or(c, "weight", json.Number("100"))}, {"description", f.or(c, "description", "")},
			{"required", f.or(c, "required", false)}, {"default", c["default"]},
			{"ui_visible", f.or(c, "ui_visible", "always")}, {"ui_editable", f.or(c, "ui_editable", "yes")},
			{"validation_regex", f.or(c, "validation_regex", "")}, {"choice_set", nil}}
		if cs, named := c["choice_set"]; named && cs != nil {
			id, ok := ids[fmt.Sprint("choice set/", cs)]
			if !ok {
				return fmt.Errorf("load custom field %v into the NetBox emulator: its choice set %v is not in the file", c["name"], cs)
			}
			body[len(body)-1].V = json.Number(strconv.Itoa(id))
		}
		if err := add("custom field", c, body, idOf(e.addCustomField)); err != nil {
			return err
		}
	}
	for _, w := range webhooks {
		path, _ := w["path"].(string)
		body := obj{{"name", w["name"]}, {"description", f.or(w, "description", "")},
			{"payload_url", fleetdURL + path}, {"http_method", f.or(w, "http_method", "POST")},
			{"http_content_type", f.or(w, "http_content_type", "application/json")}, {"secret", ""}}
		if f.or(w, "signed", true) == true {
			body[len(body)-1].V = secret
		}
		if err := add("webhook", w, body, idOf(e.addWebhook)); err != nil {
			return err
		}
	}
	for _, r := range rules {
		id, ok := ids[fmt.Sprint("webhook/", r["webhook"])]
		if !ok {
			return fmt.Errorf("load event rule %v into the NetBox emulator: its webhook %v is not in the file", r["name"], r["webhook"])
		}
		body := obj{{"name", r["name"]}, {"description", f.or(r, "description", "")},
			{"object_types", r["object_types"]}, {"event_types", r["event_types"]},
			{"enabled", f.or(r, "enabled", true)}, {"conditions", r["conditions"]},
			{"action_type", "webhook"}, {"action_object_type", "extras.webhook"},
			{"action_object_id", json.Number(strconv.Itoa(id))}}
		if err := add("event rule", r, body, idOf(e.addEventRule)); err != nil {
			return err
		}
	}
	return nil
}

// schemaFile is netbox-webhooks.yaml decoded: four lists of objects. Its first problem of
// shape (a list that is not one, an item that is not a mapping) is kept in err.
type schemaFile struct {
	doc any
	err error
}

func (f *schemaFile) list(key string) []map[string]any {
	top, _ := f.doc.(map[string]any)
	items, ok := top[key].([]any)
	if !ok && top[key] != nil && f.err == nil {
		f.err = fmt.Errorf("netbox-webhooks.yaml: %s is not a list", key)
	}
	var out []map[string]any
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			if f.err == nil {
				f.err = fmt.Errorf("netbox-webhooks.yaml: %s[%d] is not a mapping", key, i)
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// or is the root's try(each.value.KEY, def): the value when the file has the key and it is
// not null.
func (f *schemaFile) or(m map[string]any, key string, def any) any {
	if v, ok := m[key]; ok && v != nil {
		return v
	}
	return def
}

func idOf[T interface{ getID() int }](fn func(obj, time.Time) (T, obj)) func(obj, time.Time) (int, obj) {
	return func(b obj, now time.Time) (int, obj) {
		v, errs := fn(b, now)
		if errs != nil {
			return 0, errs
		}
		return v.getID(), nil
	}
}

func (c *choiceSet) getID() int   { return c.id }
func (c *customField) getID() int { return c.id }
func (w *webhook) getID() int     { return w.id }
func (r *eventRule) getID() int   { return r.id }

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// DeviceSpec is a device to seed, with its interfaces, MACs and primary IPv4.
type DeviceSpec struct {
	Name         string
	Site         string // created by name when missing; default "folly"
	Role         string // default "server"
	Manufacturer string // default "Generic"
	DeviceType   string // the model; default "server"
	Status       string // default "planned"
	Serial       string
	Interfaces   []InterfaceSpec
	// PrimaryIPv4 (e.g. "10.0.0.21/24") is assigned to the first interface and set primary.
	PrimaryIPv4 string
	// CustomFields are stored as given (JSON values: string, bool, float64/json.Number, nil);
	// they are validated like an API write.
	CustomFields map[string]any
	// FieldsFor, when set, gives the custom fields instead of CustomFields, from the id the device
	// is given: for values that name it, as fleetd's seal does (called under the emulator's lock:
	// it must not call the emulator).
	FieldsFor func(id int64) (map[string]any, error)
}

// InterfaceSpec is an interface of a seeded device.
type InterfaceSpec struct {
	Name     string // default eth<n>
	Type     string // default 1000base-t
	MgmtOnly bool
	MACs     []string // the first becomes the interface's primary MAC
}

// AddDevice seeds a device and returns its id.
func (e *Emulator) AddDevice(spec DeviceSpec) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Clock().UTC().Truncate(time.Microsecond)
	if spec.Name == "" || e.db.deviceByName(spec.Name) != nil {
		return 0, fmt.Errorf("add device %q: the name must be set and unused", spec.Name)
	}
	d := &device{id: e.db.next("device"), name: spec.Name, status: or(spec.Status, "planned"),
		serial: spec.Serial, site: e.namedID(e.db.sites, "site", or(spec.Site, "folly"), now),
		role:       e.namedID(e.db.roles, "role", or(spec.Role, "server"), now),
		deviceType: e.deviceTypeID(or(spec.Manufacturer, "Generic"), or(spec.DeviceType, "server"), now),
		created:    now, lastUpdated: now}
	fields := spec.CustomFields
	if spec.FieldsFor != nil {
		var err error
		if fields, err = spec.FieldsFor(int64(d.id)); err != nil {
			return 0, fmt.Errorf("add device %s: %w", spec.Name, err)
		}
	}
	cf, msg := e.cleanCFs("dcim.device", jsonValues(fields))
	if msg != "" {
		return 0, fmt.Errorf("add device %s: %s", spec.Name, msg)
	}
	d.cf = cf
	first := 0 // the device's first interface, where a primary IPv4 sits
	for n, is := range spec.Interfaces {
		id, err := e.seedInterface(d, n, is, now)
		if err != nil {
			return 0, err
		}
		if first == 0 {
			first = id
		}
	}
	if spec.PrimaryIPv4 != "" {
		if err := e.seedIP(d, first, spec.PrimaryIPv4, now); err != nil {
			return 0, err
		}
	}
	e.db.devices[d.id] = d
	return int64(d.id), nil
}

// seedInterface adds interface n of device d and returns its id.
func (e *Emulator) seedInterface(d *device, n int, is InterfaceSpec, now time.Time) (int, error) {
	i := &iface{id: e.db.next("interface"), device: d.id, name: or(is.Name, fmt.Sprintf("eth%d", n)),
		typ: or(is.Type, "1000base-t"), enabled: true, mgmtOnly: is.MgmtOnly, created: now, lastUpdated: now}
	if _, ok := interfaceTypeLabels[i.typ]; !ok {
		return 0, fmt.Errorf("add device %s: interface type %q is not one the emulator knows", d.name, i.typ)
	}
	e.db.ifaces[i.id] = i
	for k, raw := range is.MACs {
		mac, ok := canonicalMAC(raw)
		if !ok {
			return 0, fmt.Errorf("add device %s: %q is not a MAC address", d.name, raw)
		}
		m := &macAddr{id: e.db.next("macaddress"), mac: mac, iface: i.id, created: now, lastUpdated: now}
		e.db.macs[m.id] = m
		if k == 0 {
			i.primaryMAC = m.id
		}
	}
	return i.id, nil
}

// seedIP adds addr on interface first (0: the device has none) and makes it d's primary IPv4.
func (e *Emulator) seedIP(d *device, first int, addr string, now time.Time) error {
	p, err := netip.ParsePrefix(addr)
	if err != nil || !p.Addr().Is4() {
		return fmt.Errorf("add device %s: primary IPv4 %q is not an IPv4 address with prefix length", d.name, addr)
	}
	if first == 0 {
		return fmt.Errorf("add device %s: a primary IPv4 needs an interface to sit on", d.name)
	}
	ip := &ipAddr{id: e.db.next("ipaddress"), address: p, status: "active", iface: first, created: now, lastUpdated: now}
	e.db.ips[ip.id] = ip
	d.primaryIP4 = ip.id
	return nil
}

func (e *Emulator) namedID(table map[int]*named, seq, name string, now time.Time) int {
	for _, n := range table {
		if n.name == name {
			return n.id
		}
	}
	n := &named{id: e.db.next(seq), name: name, slug: slugify(name), created: now, lastUpdated: now}
	table[n.id] = n
	return n.id
}

func (e *Emulator) deviceTypeID(mfr, model string, now time.Time) int {
	m := e.namedID(e.db.mfrs, "manufacturer", mfr, now)
	for _, t := range e.db.deviceTypes {
		if t.name == model && t.manufacturer == m {
			return t.id
		}
	}
	t := &deviceType{named: named{id: e.db.next("devicetype"), name: model, slug: slugify(model),
		created: now, lastUpdated: now}, manufacturer: m}
	e.db.deviceTypes[t.id] = t
	return t.id
}

// jsonValues turns Go values into the decoded-JSON values the emulator stores.
func jsonValues(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	raw, _ := json.Marshal(m)
	v, _ := decodeJSON(raw)
	return v.(map[string]any)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package netboxemu

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/netbox"
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

// LoadSchema creates the schema's choice sets, custom fields, webhooks and event rules, as the
// OpenTofu root does. Each webhook's payload_url is fleetdURL + its path; signed webhooks get
// secret.
func (e *Emulator) LoadSchema(s netbox.Schema, fleetdURL, secret string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Clock().UTC().Truncate(time.Microsecond)
	ids := map[string]int{}
	add := func(what, name string, body obj, fn func(obj, time.Time) (int, obj)) error {
		id, errs := fn(body, now)
		if errs != nil {
			return fmt.Errorf("load %s %s into the NetBox emulator: %s", what, name, encodeREST(errs))
		}
		ids[what+"/"+name] = id
		return nil
	}
	for _, cs := range s.ChoiceSets {
		choices := []any{}
		for _, ch := range cs.Choices {
			choices = append(choices, []any{ch.Value, ch.Label})
		}
		body := obj{{"name", cs.Name}, {"description", cs.Description}, {"extra_choices", choices}}
		if err := add("choice set", cs.Name, body, idOf(e.addChoiceSet)); err != nil {
			return err
		}
	}
	for _, f := range s.CustomFields {
		body := obj{{"name", f.Name}, {"label", f.Label}, {"type", f.Type}, {"object_types", toAny(f.ObjectTypes)},
			{"group_name", f.GroupName}, {"weight", json.Number(fmt.Sprint(f.Weight))},
			{"description", f.Description}, {"required", f.Required}, {"default", f.Default},
			{"ui_visible", f.UIVisible}, {"ui_editable", f.UIEditable}, {"validation_regex", f.ValidationRegex}}
		if f.ChoiceSet != "" {
			body = append(body, field{"choice_set", json.Number(fmt.Sprint(ids["choice set/"+f.ChoiceSet]))})
		}
		if err := add("custom field", f.Name, body, idOf(e.addCustomField)); err != nil {
			return err
		}
	}
	for _, w := range s.Webhooks {
		body := obj{{"name", w.Name}, {"description", w.Description},
			{"payload_url", strings.TrimSuffix(fleetdURL, "/") + w.Path}, {"http_method", w.HTTPMethod},
			{"http_content_type", w.ContentType}}
		if w.Signed {
			body = append(body, field{"secret", secret})
		}
		if err := add("webhook", w.Name, body, idOf(e.addWebhook)); err != nil {
			return err
		}
	}
	for _, r := range s.EventRules {
		body := obj{{"name", r.Name}, {"description", r.Description}, {"object_types", toAny(r.ObjectTypes)},
			{"event_types", toAny(r.EventTypes)}, {"enabled", r.Enabled},
			{"action_type", "webhook"}, {"action_object_type", "extras.webhook"},
			{"action_object_id", json.Number(fmt.Sprint(ids["webhook/"+r.Webhook]))}}
		if r.Conditions != nil {
			raw, _ := json.Marshal(r.Conditions)
			cond, _ := decodeJSON(raw)
			body = append(body, field{"conditions", cond})
		}
		if err := add("event rule", r.Name, body, idOf(e.addEventRule)); err != nil {
			return err
		}
	}
	return nil
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
	cf, msg := e.cleanCFs("dcim.device", jsonValues(spec.CustomFields))
	if msg != "" {
		return 0, fmt.Errorf("add device %s: %s", spec.Name, msg)
	}
	d.cf = cf
	for n, is := range spec.Interfaces {
		if err := e.seedInterface(d, n, is, now); err != nil {
			return 0, err
		}
	}
	if spec.PrimaryIPv4 != "" {
		if err := e.seedIP(d, spec.PrimaryIPv4, now); err != nil {
			return 0, err
		}
	}
	e.db.devices[d.id] = d
	return int64(d.id), nil
}

func (e *Emulator) seedInterface(d *device, n int, is InterfaceSpec, now time.Time) error {
	i := &iface{id: e.db.next("interface"), device: d.id, name: or(is.Name, fmt.Sprintf("eth%d", n)),
		typ: or(is.Type, "1000base-t"), enabled: true, mgmtOnly: is.MgmtOnly, created: now, lastUpdated: now}
	if _, ok := interfaceTypeLabels[i.typ]; !ok {
		return fmt.Errorf("add device %s: interface type %q is not one the emulator knows", d.name, i.typ)
	}
	e.db.ifaces[i.id] = i
	for k, raw := range is.MACs {
		mac, ok := canonicalMAC(raw)
		if !ok {
			return fmt.Errorf("add device %s: %q is not a MAC address", d.name, raw)
		}
		m := &macAddr{id: e.db.next("macaddress"), mac: mac, iface: i.id, created: now, lastUpdated: now}
		e.db.macs[m.id] = m
		if k == 0 {
			i.primaryMAC = m.id
		}
	}
	return nil
}

func (e *Emulator) seedIP(d *device, addr string, now time.Time) error {
	p, err := netip.ParsePrefix(addr)
	if err != nil || !p.Addr().Is4() {
		return fmt.Errorf("add device %s: primary IPv4 %q is not an IPv4 address with prefix length", d.name, addr)
	}
	first := 0
	for _, id := range sortedIDs(e.db.ifaces, func(a, b *iface) bool { return a.id < b.id }) {
		if e.db.ifaces[id].device == d.id {
			first = id
			break
		}
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

package netboxemu

import (
	"fmt"
	"strings"
)

func (e *Emulator) renderInterface(c rc, i *iface) obj {
	var primary, macStr any
	macs := []any{}
	for _, m := range e.macsOf(i.id) {
		macs = append(macs, e.briefMAC(c, m))
	}
	if m, ok := e.db.macs[i.primaryMAC]; ok {
		primary, macStr = e.briefMAC(c, m), m.mac
	}
	ipCount := e.ipCount(i.id)
	path := fmt.Sprintf("dcim/interfaces/%d/", i.id)
	return obj{{"id", i.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", i.name},
		{"device", e.briefDevice(c, i.device)}, {"vdcs", []any{}}, {"module", nil}, {"name", i.name},
		{"label", ""}, {"type", choice(i.typ, interfaceTypeLabels[i.typ])}, {"enabled", i.enabled},
		{"parent", nil}, {"bridge", nil}, {"bridge_interfaces", []any{}}, {"lag", nil}, {"mtu", nil},
		{"mac_address", macStr}, {"primary_mac_address", primary}, {"mac_addresses", macs}, {"speed", nil},
		{"duplex", nil}, {"wwn", nil}, {"mgmt_only", i.mgmtOnly}, {"description", i.description},
		{"mode", nil}, {"rf_role", nil}, {"rf_channel", nil}, {"poe_mode", nil}, {"poe_type", nil},
		{"rf_channel_frequency", nil}, {"rf_channel_width", nil}, {"tx_power", nil}, {"untagged_vlan", nil},
		{"tagged_vlans", []any{}}, {"qinq_svlan", nil}, {"vlan_translation_policy", nil},
		{"mark_connected", false}, {"cable", nil}, {"cable_end", ""}, {"wireless_link", nil},
		{"link_peers", []any{}}, {"link_peers_type", nil}, {"wireless_lans", []any{}}, {"vrf", nil},
		{"l2vpn_termination", nil}, {"connected_endpoints", nil}, {"connected_endpoints_type", nil},
		{"connected_endpoints_reachable", nil}, {"owner", nil}, {"tags", []any{}},
		{"custom_fields", e.renderCFs("dcim.interface", nil)}, {"created", restTime(i.created)},
		{"last_updated", restTime(i.lastUpdated)}, {"count_ipaddresses", ipCount}, {"count_fhrp_groups", 0},
		{"_occupied", false}}
}

func (e *Emulator) renderMAC(c rc, m *macAddr) obj {
	path := fmt.Sprintf("dcim/mac-addresses/%d/", m.id)
	return obj{{"id", m.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", m.mac},
		{"mac_address", m.mac}, {"assigned_object_type", assignedType(m.iface)},
		{"assigned_object_id", nullableID(m.iface)}, {"assigned_object", e.briefInterface(c, m.iface)},
		{"description", m.description}, {"owner", nil}, {"comments", ""}, {"tags", []any{}},
		{"custom_fields", e.renderCFs("dcim.macaddress", nil)}, {"created", restTime(m.created)},
		{"last_updated", restTime(m.lastUpdated)}}
}

func (e *Emulator) renderIP(c rc, ip *ipAddr) obj {
	path := fmt.Sprintf("ipam/ip-addresses/%d/", ip.id)
	return obj{{"id", ip.id}, {"url", c.api(path)}, {"display_url", c.ui(path)},
		{"display", ip.address.String()}, {"family", family(ip)}, {"address", ip.address.String()},
		{"vrf", nil}, {"tenant", nil}, {"status", choice(ip.status, ipStatusLabels[ip.status])}, {"role", nil},
		{"assigned_object_type", assignedType(ip.iface)}, {"assigned_object_id", nullableID(ip.iface)},
		{"assigned_object", e.briefInterface(c, ip.iface)}, {"nat_inside", nil}, {"nat_outside", []any{}},
		{"dns_name", ip.dnsName}, {"description", ip.description}, {"owner", nil}, {"comments", ""},
		{"tags", []any{}}, {"custom_fields", e.renderCFs("ipam.ipaddress", nil)},
		{"created", restTime(ip.created)}, {"last_updated", restTime(ip.lastUpdated)}}
}

func (e *Emulator) renderJournal(c rc, j *journalEntry) obj {
	path := fmt.Sprintf("extras/journal-entries/%d/", j.id)
	var assigned any
	if j.objType == "dcim.device" {
		if _, ok := e.db.devices[j.objID]; ok {
			assigned = e.briefDevice(c, j.objID)
		}
	}
	display := journalDisplay(j)
	return obj{{"id", j.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", display},
		{"assigned_object_type", j.objType}, {"assigned_object_id", j.objID}, {"assigned_object", assigned},
		{"created", restTime(j.created)}, {"created_by", nullableID(j.createdBy)},
		{"kind", choice(j.kind, journalKindLabels[j.kind])}, {"comments", j.comments}, {"tags", []any{}},
		{"custom_fields", obj{}}, {"last_updated", restTime(j.lastUpdated)}}
}

// journalDisplay is JournalEntry.__str__: the local (UTC) date and time to the minute, and the kind.
func journalDisplay(j *journalEntry) string {
	return fmt.Sprintf("%s (%s)", j.created.UTC().Format("2006-01-02 15:04"), journalKindLabels[j.kind])
}

func (e *Emulator) renderChoiceSet(c rc, cs *choiceSet) obj {
	path := fmt.Sprintf("extras/custom-field-choice-sets/%d/", cs.id)
	choices := []any{}
	for _, ch := range cs.choices {
		choices = append(choices, []any{ch[0], ch[1]})
	}
	return obj{{"id", cs.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", cs.name},
		{"name", cs.name}, {"description", cs.description}, {"base_choices", nil}, {"extra_choices", choices},
		{"order_alphabetically", false}, {"choices_count", len(cs.choices)}, {"owner", nil},
		{"created", restTime(cs.created)}, {"last_updated", restTime(cs.lastUpdated)}}
}

var cfTypeLabels = map[string]string{"text": "Text", "longtext": "Text (long)", "integer": "Integer",
	"decimal": "Decimal", "boolean": "Boolean (true/false)", "date": "Date", "datetime": "Date & time",
	"url": "URL", "json": "JSON", "select": "Selection", "multiselect": "Multiple selection"}

var cfDataTypes = map[string]string{"text": "string", "longtext": "string", "integer": "integer",
	"decimal": "decimal", "boolean": "boolean", "date": "string", "datetime": "string", "url": "string",
	"json": "object", "select": "string", "multiselect": "array"}

func (e *Emulator) renderCustomField(c rc, cf *customField) obj {
	path := fmt.Sprintf("extras/custom-fields/%d/", cf.id)
	var cs any
	if s, ok := e.db.choiceSets[cf.choiceSet]; ok {
		p := fmt.Sprintf("extras/custom-field-choice-sets/%d/", s.id)
		cs = obj{{"id", s.id}, {"url", c.api(p)}, {"display", s.name}, {"name", s.name},
			{"description", s.description}, {"choices_count", len(s.choices)}}
	}
	return obj{{"id", cf.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", cfDisplay(cf)},
		{"object_types", cf.objectTypes}, {"type", choice(cf.typ, cfTypeLabels[cf.typ])},
		{"related_object_type", nil}, {"data_type", cfDataTypes[cf.typ]}, {"name", cf.name}, {"label", cf.label},
		{"group_name", cf.groupName}, {"description", cf.description}, {"required", cf.required},
		{"unique", false}, {"search_weight", cf.searchWeight},
		{"filter_logic", choice(cf.filterLogic, filterLogicLabels[cf.filterLogic])},
		{"ui_visible", choice(cf.uiVisible, uiVisibleLabels[cf.uiVisible])},
		{"ui_editable", choice(cf.uiEditable, uiEditableLabels[cf.uiEditable])}, {"is_cloneable", false},
		{"default", cf.def}, {"related_object_filter", nil}, {"weight", cf.weight},
		{"validation_minimum", nil}, {"validation_maximum", nil}, {"validation_regex", cf.validationRegex},
		{"validation_schema", nil}, {"choice_set", cs}, {"owner", nil}, {"comments", ""},
		{"created", restTime(cf.created)}, {"last_updated", restTime(cf.lastUpdated)}}
}

var (
	uiVisibleLabels   = map[string]string{"always": "Always", "if-set": "If set", "hidden": "Hidden"}
	uiEditableLabels  = map[string]string{"yes": "Yes", "no": "No", "hidden": "Hidden"}
	filterLogicLabels = map[string]string{"disabled": "Disabled", "loose": "Loose", "exact": "Exact"}
)

func cfDisplay(cf *customField) string {
	if cf.label != "" {
		return cf.label
	}
	s := strings.ReplaceAll(cf.name, "_", " ")
	return strings.ToUpper(s[:1]) + s[1:]
}

func (e *Emulator) renderWebhook(c rc, w *webhook) obj {
	path := fmt.Sprintf("extras/webhooks/%d/", w.id)
	return obj{{"id", w.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", w.name},
		{"name", w.name}, {"description", w.description}, {"payload_url", w.payloadURL},
		{"http_method", w.httpMethod}, {"http_content_type", w.contentType},
		{"additional_headers", w.additionalHeaders}, {"body_template", ""}, {"secret", w.secret},
		{"ssl_verification", w.sslVerification}, {"ca_file_path", nil}, {"owner", nil},
		{"custom_fields", obj{}}, {"tags", []any{}}, {"created", restTime(w.created)},
		{"last_updated", restTime(w.lastUpdated)}}
}

func (e *Emulator) renderEventRule(c rc, r *eventRule) obj {
	path := fmt.Sprintf("extras/event-rules/%d/", r.id)
	var action any
	if w, ok := e.db.webhooks[r.webhook]; ok {
		p := fmt.Sprintf("extras/webhooks/%d/", w.id)
		action = obj{{"id", w.id}, {"url", c.api(p)}, {"display", w.name}, {"name", w.name},
			{"description", w.description}}
	}
	return obj{{"id", r.id}, {"url", c.api(path)}, {"display_url", c.ui(path)}, {"display", r.name},
		{"object_types", r.objectTypes}, {"name", r.name}, {"enabled", r.enabled},
		{"event_types", r.eventTypes}, {"conditions", r.conditions},
		{"action_type", choice("webhook", "Webhook")}, {"action_object_type", "extras.webhook"},
		{"action_object_id", r.webhook}, {"action_object", action}, {"description", r.description},
		{"owner", nil}, {"comments", ""}, {"custom_fields", obj{}}, {"tags", []any{}},
		{"created", restTime(r.created)}, {"last_updated", restTime(r.lastUpdated)}}
}

func macLess(a, b *macAddr) bool { return a.mac < b.mac }

package netboxemu

import (
	"fmt"
	"sort"
	"time"
)

// Snapshots are what Django's model serializer makes of a row (NB@v4.6.8:netbox/utilities/
// serialization.py serialize_object): no pk, foreign keys as integer ids, choices as raw values,
// custom_fields as the raw custom_field_data (jsonb key order), tags as sorted names, datetimes
// with millisecond precision, and last_updated left out (CHANGELOG_SKIP_EMPTY_CHANGES).

// djangoTime is DjangoJSONEncoder's datetime: isoformat cut to milliseconds, UTC as Z.
func djangoTime(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05")
	if ms := t.Nanosecond() / 1000; ms != 0 {
		s += fmt.Sprintf(".%06d", ms)[:4]
	}
	return s + "Z"
}

// contentTypeIDs are the django_content_type ids the emulator reports for GFK fields.
var contentTypeIDs = map[string]int{"dcim.device": 28, "dcim.interface": 37, "dcim.macaddress": 109,
	"ipam.ipaddress": 64, "extras.customfield": 76, "extras.customfieldchoiceset": 77, "extras.webhook": 80,
	"extras.eventrule": 82, "extras.journalentry": 83}

func rawCFs(data map[string]any) obj {
	o := obj{}
	for _, k := range jsonbKeys(data) {
		o = append(o, field{k, data[k]})
	}
	return o
}

func sortedTags(tags []string) []any {
	s := append([]string(nil), tags...)
	sort.Strings(s)
	out := []any{}
	for _, t := range s {
		out = append(out, t)
	}
	return out
}

func (e *Emulator) snapDevice(d *device) obj {
	ifaces := 0
	for _, i := range e.db.ifaces {
		if i.device == d.id {
			ifaces++
		}
	}
	var assetTag any
	if d.assetTag != nil {
		assetTag = *d.assetTag
	}
	return obj{{"created", djangoTime(d.created)}, {"owner", nil}, {"description", d.description},
		{"comments", d.comments}, {"local_context_data", nil}, {"config_template", nil},
		{"device_type", d.deviceType}, {"role", d.role}, {"tenant", nil}, {"platform", nil}, {"name", d.name},
		{"serial", d.serial}, {"asset_tag", assetTag}, {"site", d.site}, {"location", nil}, {"rack", nil},
		{"position", nil}, {"face", ""}, {"status", d.status}, {"airflow", nil},
		{"primary_ip4", nullableID(d.primaryIP4)}, {"primary_ip6", nil}, {"oob_ip", nil}, {"cluster", nil},
		{"virtual_chassis", nil}, {"vc_position", nil}, {"vc_priority", nil}, {"latitude", nil},
		{"longitude", nil}, {"console_port_count", 0}, {"console_server_port_count", 0},
		{"power_port_count", 0}, {"power_outlet_count", 0}, {"interface_count", ifaces},
		{"front_port_count", 0}, {"rear_port_count", 0}, {"device_bay_count", 0}, {"module_bay_count", 0},
		{"inventory_item_count", 0}, {"custom_fields", rawCFs(d.cf)}, {"tags", sortedTags(d.tags)}}
}

func (e *Emulator) snapInterface(i *iface) obj {
	return obj{{"created", djangoTime(i.created)}, {"owner", nil}, {"description", i.description},
		{"device", i.device}, {"module", nil}, {"name", i.name}, {"label", ""}, {"mark_connected", false},
		{"cable", nil}, {"cable_end", ""}, {"enabled", i.enabled}, {"mtu", nil}, {"mgmt_only", i.mgmtOnly},
		{"type", i.typ}, {"primary_mac_address", nullableID(i.primaryMAC)}, {"parent", nil},
		{"bridge", nil}, {"lag", nil}, {"speed", nil}, {"duplex", nil}, {"wwn", nil}, {"mode", nil},
		{"vrf", nil}, {"custom_fields", obj{}}, {"tags", []any{}}}
}

func (e *Emulator) snapMAC(m *macAddr) obj {
	var ct any
	if m.iface != 0 {
		ct = contentTypeIDs["dcim.interface"]
	}
	return obj{{"created", djangoTime(m.created)}, {"owner", nil}, {"description", m.description},
		{"comments", ""}, {"mac_address", m.mac}, {"assigned_object_type", ct},
		{"assigned_object_id", nullableID(m.iface)}, {"custom_fields", obj{}}, {"tags", []any{}}}
}

func (e *Emulator) snapIP(ip *ipAddr) obj {
	var ct any
	if ip.iface != 0 {
		ct = contentTypeIDs["dcim.interface"]
	}
	return obj{{"created", djangoTime(ip.created)}, {"owner", nil}, {"description", ip.description},
		{"comments", ""}, {"address", ip.address.String()}, {"vrf", nil}, {"tenant", nil},
		{"status", ip.status}, {"role", ""}, {"assigned_object_type", ct},
		{"assigned_object_id", nullableID(ip.iface)}, {"nat_inside", nil}, {"dns_name", ip.dnsName},
		{"custom_fields", obj{}}, {"tags", []any{}}}
}

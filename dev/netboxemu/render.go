package netboxemu

import (
	"fmt"
	"time"
)

// REST representations, field for field in the order of NetBox 4.6.8's serializers
// (dcim/api/serializers_/devices.py, device_components.py, ipam/api/serializers_/ip.py,
// extras/api/serializers_/journaling.py). The caller holds Emulator.mu.

// rc is the render context: base is "http://host" for API responses (DRF builds absolute URLs
// from the request) and "" for webhook data (serialized with request=None: relative URLs).
type rc struct {
	base      string
	noContext bool // ?exclude=config_context: devices without config_context
}

func (c rc) api(path string) string { return c.base + "/api/" + path }
func (c rc) ui(path string) string  { return c.base + "/" + path }

// restTime renders a datetime as DRF does: isoformat with microseconds when non-zero, UTC as Z.
func restTime(t time.Time) string {
	return pyISO(t.UTC(), "Z")
}

// pyISO is Python's datetime.isoformat for a UTC time, with zone suffix suffix.
func pyISO(t time.Time, suffix string) string {
	s := t.UTC().Format("2006-01-02T15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	return s + suffix
}

// etag is NetBox 4.6's weak ETag: W/"<last_updated.isoformat()>" (ETagMixin,
// NB@v4.6.8:netbox/netbox/api/viewsets/__init__.py).
func etag(lastUpdated time.Time) string {
	return `W/"` + pyISO(lastUpdated, "+00:00") + `"`
}

func choice(value, label string) any {
	if value == "" {
		return nil
	}
	return obj{{"value", value}, {"label", label}}
}

var deviceStatusLabels = map[string]string{"offline": "Offline", "active": "Active", "planned": "Planned",
	"staged": "Staged", "failed": "Failed", "inventory": "Inventory", "decommissioning": "Decommissioning"}

var ipStatusLabels = map[string]string{"active": "Active", "reserved": "Reserved", "deprecated": "Deprecated",
	"dhcp": "DHCP", "slaac": "SLAAC"}

var journalKindLabels = map[string]string{"info": "Info", "success": "Success", "warning": "Warning", "danger": "Danger"}

// interfaceTypeLabels is the subset of dcim InterfaceTypeChoices the emulator accepts.
var interfaceTypeLabels = map[string]string{"virtual": "Virtual", "1000base-t": "1000BASE-T (1GE)",
	"2.5gbase-t": "2.5GBASE-T (2.5GE)", "10gbase-t": "10GBASE-T (10GE)", "10gbase-x-sfpp": "SFP+ (10GE)",
	"25gbase-x-sfp28": "SFP28 (25GE)", "other": "Other"}

func (e *Emulator) briefSite(c rc, id int) obj {
	s := e.db.sites[id]
	return obj{{"id", s.id}, {"url", c.api(fmt.Sprintf("dcim/sites/%d/", s.id))}, {"display", s.name},
		{"name", s.name}, {"slug", s.slug}, {"description", s.description}}
}

func (e *Emulator) briefRole(c rc, id int) obj {
	r := e.db.roles[id]
	return obj{{"id", r.id}, {"url", c.api(fmt.Sprintf("dcim/device-roles/%d/", r.id))}, {"display", r.name},
		{"name", r.name}, {"slug", r.slug}, {"description", r.description}, {"device_count", 0},
		{"virtualmachine_count", 0}, {"_depth", 0}}
}

func (e *Emulator) briefDeviceType(c rc, id int) obj {
	t := e.db.deviceTypes[id]
	m := e.db.mfrs[t.manufacturer]
	count := e.deviceTypeCount(id)
	mfr := obj{{"id", m.id}, {"url", c.api(fmt.Sprintf("dcim/manufacturers/%d/", m.id))}, {"display", m.name},
		{"name", m.name}, {"slug", m.slug}, {"description", m.description}}
	return obj{{"id", t.id}, {"url", c.api(fmt.Sprintf("dcim/device-types/%d/", t.id))}, {"display", t.name},
		{"manufacturer", mfr}, {"model", t.name}, {"slug", t.slug}, {"description", t.description},
		{"device_count", count}}
}

func (e *Emulator) briefDevice(c rc, id int) obj {
	d := e.db.devices[id]
	return obj{{"id", d.id}, {"url", c.api(fmt.Sprintf("dcim/devices/%d/", d.id))}, {"display", d.name},
		{"name", d.name}, {"description", d.description}}
}

// deviceIP is the nested primary IP of a device (brief fields plus dns_name and NAT).
func (e *Emulator) deviceIP(c rc, id int) any {
	ip, ok := e.db.ips[id]
	if !ok {
		return nil
	}
	return obj{{"id", ip.id}, {"url", c.api(fmt.Sprintf("ipam/ip-addresses/%d/", ip.id))},
		{"display", ip.address.String()}, {"family", family(ip)}, {"address", ip.address.String()},
		{"nat_inside", nil}, {"nat_outside", []any{}}, {"dns_name", ip.dnsName}, {"description", ip.description}}
}

func family(ip *ipAddr) obj {
	if ip.address.Addr().Is4() {
		return obj{{"value", 4}, {"label", "IPv4"}}
	}
	return obj{{"value", 6}, {"label", "IPv6"}}
}

// renderDevice is DeviceSerializer (withContext false: webhook data) or
// DeviceWithConfigContextSerializer (the API's list and detail views).
func (e *Emulator) renderDevice(c rc, d *device, withContext bool) obj {
	ip4 := e.deviceIP(c, d.primaryIP4)
	var assetTag any
	if d.assetTag != nil {
		assetTag = *d.assetTag
	}
	ifaces := e.interfaceCount(d.id)
	o := obj{{"id", d.id}, {"url", c.api(fmt.Sprintf("dcim/devices/%d/", d.id))},
		{"display_url", c.ui(fmt.Sprintf("dcim/devices/%d/", d.id))}, {"display", d.name}, {"name", d.name},
		{"device_type", e.briefDeviceType(c, d.deviceType)}, {"role", e.briefRole(c, d.role)},
		{"tenant", nil}, {"platform", nil}, {"serial", d.serial}, {"asset_tag", assetTag},
		{"site", e.briefSite(c, d.site)}, {"location", nil}, {"rack", nil}, {"position", nil}, {"face", nil},
		{"latitude", nil}, {"longitude", nil}, {"parent_device", nil},
		{"status", choice(d.status, deviceStatusLabels[d.status])}, {"airflow", nil},
		{"primary_ip", ip4}, {"primary_ip4", ip4}, {"primary_ip6", nil}, {"oob_ip", nil}, {"cluster", nil},
		{"virtual_chassis", nil}, {"vc_position", nil}, {"vc_priority", nil}, {"description", d.description},
		{"owner", nil}, {"comments", d.comments}, {"config_template", nil}}
	if withContext {
		o = append(o, field{"config_context", obj{}})
	}
	o = append(o, obj{{"local_context_data", nil}, {"tags", e.renderTags(c, d.tags)},
		{"custom_fields", e.renderCFs("dcim.device", d.cf)}, {"created", restTime(d.created)},
		{"last_updated", restTime(d.lastUpdated)}, {"console_port_count", 0}, {"console_server_port_count", 0},
		{"power_port_count", 0}, {"power_outlet_count", 0}, {"interface_count", ifaces}, {"front_port_count", 0},
		{"rear_port_count", 0}, {"device_bay_count", 0}, {"module_bay_count", 0}, {"inventory_item_count", 0}}...)
	return o
}

func (e *Emulator) renderTags(c rc, names []string) []any {
	out := []any{}
	for i, n := range names {
		out = append(out, obj{{"id", i + 1}, {"url", c.api(fmt.Sprintf("extras/tags/%d/", i+1))},
			{"display_url", c.ui(fmt.Sprintf("extras/tags/%d/", i+1))}, {"display", n}, {"name", n},
			{"slug", slugify(n)}, {"color", "9e9e9e"}})
	}
	return out
}

// renderCFs is CustomFieldsDataField.to_representation: every custom field of the model, in
// NetBox's order, null when the object has no value.
func (e *Emulator) renderCFs(objectType string, data map[string]any) obj {
	o := obj{}
	for _, cf := range e.db.cfsFor(objectType) {
		o = append(o, field{cf.name, data[cf.name]})
	}
	return o
}

func (e *Emulator) briefMAC(c rc, m *macAddr) obj {
	return obj{{"id", m.id}, {"url", c.api(fmt.Sprintf("dcim/mac-addresses/%d/", m.id))}, {"display", m.mac},
		{"mac_address", m.mac}, {"description", m.description}}
}

func (e *Emulator) briefInterface(c rc, id int) any {
	i, ok := e.db.ifaces[id]
	if !ok {
		return nil
	}
	return obj{{"id", i.id}, {"url", c.api(fmt.Sprintf("dcim/interfaces/%d/", i.id))}, {"display", i.name},
		{"device", e.briefDevice(c, i.device)}, {"name", i.name}, {"description", i.description},
		{"cable", nil}, {"_occupied", false}}
}

func nullableID(id int) any {
	if id == 0 {
		return nil
	}
	return id
}

func assignedType(id int) any {
	if id == 0 {
		return nil
	}
	return "dcim.interface"
}

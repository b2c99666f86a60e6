package netboxemu

import (
	"net/netip"
	"time"
)

// The device resource: DeviceViewSet with DeviceFilterSet (NB@v4.6.8:netbox/dcim/filtersets.py,
// with PrimaryIPFilterSet and LocalConfigContextFilterSet) for the fields the emulator stores.

func (e *Emulator) deviceResource() *resource {
	dev := func(id int) *device { return e.db.devices[id] }
	created := func(id int) time.Time { return dev(id).created }
	updated := func(id int) time.Time { return dev(id).lastUpdated }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return dev(id).name }
	ordering["serial"] = func(id int) any { return dev(id).serial }
	ordering["status"] = func(id int) any { return dev(id).status }
	return &resource{
		path: "dcim/devices", objectType: "dcim.device", verbose: "Device", model: "Device",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.devices, func(a, b *device) bool { return a.name < b.name }, keep)
		},
		has:         idExists(func() map[int]*device { return e.db.devices }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderDevice(c, dev(id), !c.noContext) },
		eventData:   func(id int) obj { return e.renderDevice(rc{}, dev(id), false) },
		snapshot:    func(id int) obj { return e.snapDevice(dev(id)) },
		repr:        func(id int) string { return dev(id).name },
		brief:       []string{"id", "url", "display", "name", "description"},
		filters:     append(e.deviceFilters(dev), changeLogged(created, updated)...),
		search:      func(id int, q string) bool { return e.searchDevice(dev(id), q) },
		cf:          func(id int) map[string]any { return dev(id).cf },
		ordering:    ordering,
		meta:        deviceMeta,
		create:      e.newDevice,
		update:      e.saveDevice,
		remove:      e.removeDevice,
	}
}

func (e *Emulator) deviceFilters(dev func(int) *device) []filterDef {
	sites := func() map[int]*named { return e.db.sites }
	roles := func() map[int]*named { return e.db.roles }
	mfrs := func() map[int]*named { return e.db.mfrs }
	typeSlug := func(slug string) bool {
		for _, t := range e.db.deviceTypes {
			if t.slug == slug {
				return true
			}
		}
		return false
	}
	zero := func(int) any { return 0 }
	defs := []filterDef{
		numberF("id", func(id int) any { return id }),
		{name: "name", kind: fChar, base: "iexact", value: func(id int) any { return dev(id).name }},
		charF("asset_tag", func(id int) any { return textOrNil(dev(id).assetTag) }),
		charF("description", func(id int) any { return dev(id).description }),
		{name: "serial", kind: fChar, base: "iexact", value: func(id int) any { return dev(id).serial }},
		choiceF("status", deviceStatusLabels, func(id int) any { return dev(id).status }),
		refID("site_id", idExists(sites), func(id int) int { return dev(id).site }),
		refKey("site", slugExists(sites), func(id int) any { return e.db.sites[dev(id).site].slug }),
		refID("role_id", idExists(roles), func(id int) int { return dev(id).role }),
		refKey("role", slugExists(roles), func(id int) any { return e.db.roles[dev(id).role].slug }),
		refID("device_type_id", idExists(func() map[int]*deviceType { return e.db.deviceTypes }), func(id int) int { return dev(id).deviceType }),
		refKey("device_type", typeSlug, func(id int) any { return e.db.deviceTypes[dev(id).deviceType].slug }),
		refKey("model", typeSlug, func(id int) any { return e.db.deviceTypes[dev(id).deviceType].slug }),
		refID("manufacturer_id", idExists(mfrs), func(id int) int { return e.db.deviceTypes[dev(id).deviceType].manufacturer }),
		refKey("manufacturer", slugExists(mfrs), func(id int) any {
			return e.db.mfrs[e.db.deviceTypes[dev(id).deviceType].manufacturer].slug
		}),
		refID("primary_ip4_id", idExists(func() map[int]*ipAddr { return e.db.ips }), func(id int) int { return dev(id).primaryIP4 }),
		{name: "mac_address", kind: fMAC, value: func(id int) any { return e.deviceMACs(id) }},
		boolF("has_primary_ip", func(id int) any { return dev(id).primaryIP4 != 0 }),
		boolF("interfaces", func(id int) any { return e.interfaceCount(id) > 0 }),
		boolF("local_context_data", func(int) any { return false }),
		numberF("interface_count", func(id int) any { return e.interfaceCount(id) }),
	}
	for _, counter := range []string{"console_port_count", "console_server_port_count", "power_port_count",
		"power_outlet_count", "front_port_count", "rear_port_count", "device_bay_count", "module_bay_count",
		"inventory_item_count"} {
		defs = append(defs, numberF(counter, zero))
	}
	return defs
}

// deviceMACs are the MACs of a device's interfaces (interfaces__mac_addresses__mac_address).
func (e *Emulator) deviceMACs(device int) []any {
	out := []any{}
	for _, m := range e.db.macs {
		if e.deviceOf(m.iface) == device {
			out = append(out, m.mac)
		}
	}
	return out
}

// searchDevice is DeviceFilterSet.search: name, serial, asset tag, description and comments
// contain the value, or the value is an IP address and the device's primary IPv4 has that host.
func (e *Emulator) searchDevice(d *device, q string) bool {
	if anyContainsFold(q, d.name, d.serial, d.description, d.comments) ||
		(d.assetTag != nil && containsFold(*d.assetTag, q)) {
		return true
	}
	host, err := netip.ParseAddr(q)
	if p, perr := netip.ParsePrefix(q); perr == nil {
		host, err = p.Addr(), nil
	}
	ip, ok := e.db.ips[d.primaryIP4]
	return err == nil && ok && host.Is4() && ip.address.Addr() == host
}

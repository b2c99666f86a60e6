package netboxemu

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Interfaces, MAC addresses and IP addresses: InterfaceFilterSet (with DeviceComponentFilterSet),
// MACAddressFilterSet and IPAddressFilterSet (NB@v4.6.8:netbox/dcim/filtersets.py,
// ipam/filtersets.py) for the fields the emulator stores.

func (e *Emulator) interfaceResource() *resource {
	it := func(id int) *iface { return e.db.ifaces[id] }
	created := func(id int) time.Time { return it(id).created }
	updated := func(id int) time.Time { return it(id).lastUpdated }
	devs := func() map[int]*device { return e.db.devices }
	macs := func() map[int]*macAddr { return e.db.macs }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return it(id).name }
	ordering["device"] = func(id int) any { return e.db.devices[it(id).device].name }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		charF("name", func(id int) any { return it(id).name }),
		charF("label", func(int) any { return "" }),
		charF("description", func(id int) any { return it(id).description }),
		{name: "type", kind: fChoice, noNull: true, value: func(id int) any { return it(id).typ },
			choices: func() []string { return keys(interfaceTypeLabels) }},
		boolF("enabled", func(id int) any { return it(id).enabled }),
		boolF("mgmt_only", func(id int) any { return it(id).mgmtOnly }),
		boolF("mark_connected", func(int) any { return false }),
		refID("device_id", idExists(devs), func(id int) int { return it(id).device }),
		refKey("device", func(name string) bool { return e.db.deviceByName(name) != nil },
			func(id int) any { return e.db.devices[it(id).device].name }),
		choiceF("device_status", deviceStatusLabels, func(id int) any { return e.db.devices[it(id).device].status }),
		{name: "mac_address", kind: fMAC, value: func(id int) any { return macStrings(e.macsOf(id)) }},
		refID("primary_mac_address_id", idExists(macs), func(id int) int { return it(id).primaryMAC }),
		refKey("primary_mac_address", func(v string) bool { return e.macByText(v) != nil }, func(id int) any {
			if m, ok := e.db.macs[it(id).primaryMAC]; ok {
				return m.mac
			}
			return nil
		}),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "dcim/interfaces", objectType: "dcim.interface", verbose: "Interface", model: "Interface",
		rows:        func(keep func(int) bool) []int { return sortedKept(e.db.ifaces, e.ifaceOrder, keep) },
		has:         idExists(func() map[int]*iface { return e.db.ifaces }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderInterface(c, it(id)) },
		snapshot:    func(id int) obj { return e.snapInterface(it(id)) },
		repr:        func(id int) string { return it(id).name },
		related:     func(id int) (string, int) { return "dcim.device", it(id).device },
		brief:       []string{"id", "url", "display", "device", "name", "description", "cable", "_occupied"},
		filters:     filters,
		search:      func(id int, q string) bool { return anyContainsFold(q, it(id).name, it(id).description) },
		cf:          func(int) map[string]any { return nil },
		ordering:    ordering,
		meta:        interfaceMeta,
		create:      e.newInterface,
		update:      e.saveInterface,
		remove:      func(c *reqCtx, id int) bool { return e.removeInterface(c, it(id)) },
	}
}

func (e *Emulator) macResource() *resource {
	mac := func(id int) *macAddr { return e.db.macs[id] }
	created := func(id int) time.Time { return mac(id).created }
	updated := func(id int) time.Time { return mac(id).lastUpdated }
	ifs := func() map[int]*iface { return e.db.ifaces }
	ordering := baseOrdering(created, updated)
	ordering["mac_address"] = func(id int) any { return mac(id).mac }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		{name: "mac_address", kind: fMAC, value: func(id int) any { return mac(id).mac }},
		charF("description", func(id int) any { return mac(id).description }),
		typeF("assigned_object_type", func(id int) any { return assignedType(mac(id).iface) }),
		numberF("assigned_object_id", func(id int) any { return nullableID(mac(id).iface) }),
		methodF("device_id", e.onDevices(func(id int) int { return mac(id).iface }, false)),
		methodF("device", e.onDevices(func(id int) int { return mac(id).iface }, true)),
		refID("interface_id", idExists(ifs), func(id int) int { return mac(id).iface }),
		refKey("interface", e.ifaceNamed, func(id int) any { return e.ifaceName(mac(id).iface) }),
		boolF("assigned", func(id int) any { return mac(id).iface != 0 }),
		boolF("primary", func(id int) any { return e.isPrimaryMAC(id) }),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "dcim/mac-addresses", objectType: "dcim.macaddress", verbose: "MAC Address", model: "MACAddress",
		rows:        func(keep func(int) bool) []int { return sortedKept(e.db.macs, macLess, keep) },
		has:         idExists(func() map[int]*macAddr { return e.db.macs }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderMAC(c, mac(id)) },
		snapshot:    func(id int) obj { return e.snapMAC(mac(id)) },
		repr:        func(id int) string { return mac(id).mac },
		brief:       []string{"id", "url", "display", "mac_address", "description"},
		filters:     filters,
		search:      func(id int, q string) bool { return anyContainsFold(q, mac(id).mac, mac(id).description) },
		cf:          func(int) map[string]any { return nil },
		ordering:    ordering,
		meta:        macMeta,
		create:      e.newMAC,
		update:      e.saveMAC,
		remove:      e.removeMAC,
	}
}

func (e *Emulator) ipResource() *resource {
	ip := func(id int) *ipAddr { return e.db.ips[id] }
	created := func(id int) time.Time { return ip(id).created }
	updated := func(id int) time.Time { return ip(id).lastUpdated }
	ordering := baseOrdering(created, updated)
	ordering["address"] = func(id int) any { return ip(id).address.String() }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		methodF("address", func(id int, vs []string) bool { return addressIn(ip(id).address, vs) }),
		charF("dns_name", func(id int) any { return ip(id).dnsName }),
		charF("description", func(id int) any { return ip(id).description }),
		choiceF("status", ipStatusLabels, func(id int) any { return ip(id).status }),
		typeF("assigned_object_type", func(id int) any { return assignedType(ip(id).iface) }),
		numberF("assigned_object_id", func(id int) any { return nullableID(ip(id).iface) }),
		methodF("device_id", e.onDevices(func(id int) int { return ip(id).iface }, false)),
		methodF("device", e.onDevices(func(id int) int { return ip(id).iface }, true)),
		refID("interface_id", idExists(func() map[int]*iface { return e.db.ifaces }), func(id int) int { return ip(id).iface }),
		refKey("interface", e.ifaceNamed, func(id int) any { return e.ifaceName(ip(id).iface) }),
		boolF("assigned", func(id int) any { return ip(id).iface != 0 }),
		boolF("assigned_to_interface", func(id int) any { return ip(id).iface != 0 }),
		numberF("mask_length", func(id int) any { return ip(id).address.Bits() }),
		{name: "family", kind: fNumber, single: true, value: func(id int) any { return familyOf(ip(id).address) }},
	}, changeLogged(created, updated)...)
	return &resource{
		path: "ipam/ip-addresses", objectType: "ipam.ipaddress", verbose: "IP Address", model: "IPAddress",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.ips, func(a, b *ipAddr) bool { return a.address.String() < b.address.String() }, keep)
		},
		has:         idExists(func() map[int]*ipAddr { return e.db.ips }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderIP(c, ip(id)) },
		snapshot:    func(id int) obj { return e.snapIP(ip(id)) },
		repr:        func(id int) string { return ip(id).address.String() },
		related:     func(id int) (string, int) { return assignedTypeText(ip(id).iface), ip(id).iface },
		brief:       []string{"id", "url", "display", "family", "address", "description"},
		filters:     filters,
		search: func(id int, q string) bool {
			return anyContainsFold(q, ip(id).dnsName, ip(id).description) ||
				strings.HasPrefix(strings.ToUpper(ip(id).address.String()), strings.ToUpper(q))
		},
		cf:       func(int) map[string]any { return nil },
		ordering: ordering,
		meta:     ipMeta,
		create:   e.newIP,
		update:   e.saveIP,
		remove:   e.removeIP,
	}
}

// onDevices is filter_device of MACAddressFilterSet and IPAddressFilterSet: objects assigned to
// an interface of the named devices (by id, or by name); no such device matches nothing.
func (e *Emulator) onDevices(ifaceOf func(id int) int, byName bool) func(int, []string) bool {
	return func(id int, values []string) bool {
		d, ok := e.db.devices[e.deviceOf(ifaceOf(id))]
		if !ok {
			return false
		}
		if byName {
			return slices.Contains(values, d.name)
		}
		// The values are parsed, not the row's id formatted: a list filtered by device_id runs
		// this for every MAC or address in the table (Django compares the pk as a number too).
		return slices.ContainsFunc(values, func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n == d.id })
	}
}

// addressIn is filter_address (address__net_in): a value with a prefix length matches that
// exact address; one without matches the host with any prefix length. Invalid values are skipped.
func addressIn(a netip.Prefix, values []string) bool {
	for _, v := range values {
		if p, err := netip.ParsePrefix(v); err == nil && p == a {
			return true
		}
		if h, err := netip.ParseAddr(v); err == nil && h == a.Addr() {
			return true
		}
	}
	return false
}

func familyOf(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

func (e *Emulator) ifaceNamed(name string) bool {
	for _, i := range e.db.ifaces {
		if i.name == name {
			return true
		}
	}
	return false
}

func (e *Emulator) ifaceName(id int) any {
	if i, ok := e.db.ifaces[id]; ok {
		return i.name
	}
	return nil
}

func (e *Emulator) macByText(v string) *macAddr {
	canon, ok := canonicalMAC(v)
	for _, m := range e.db.macs {
		if ok && m.mac == canon {
			return m
		}
	}
	return nil
}

func (e *Emulator) isPrimaryMAC(id int) bool {
	for _, i := range e.db.ifaces {
		if i.primaryMAC == id {
			return true
		}
	}
	return false
}

func macStrings(ms []*macAddr) []any {
	out := []any{}
	for _, m := range ms {
		out = append(out, m.mac)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func assignedTypeText(id int) string {
	if id == 0 {
		return ""
	}
	return "dcim.interface"
}

package netboxemu

import (
	"net/netip"
	"time"
)

// /api/dcim/mac-addresses/ and /api/ipam/ip-addresses/: objects assigned to an interface
// (assigned_object_type "dcim.interface" and assigned_object_id).

// deviceOf is the device an interface belongs to (0 for none).
func (e *Emulator) deviceOf(ifaceID int) int {
	if i, ok := e.db.ifaces[ifaceID]; ok {
		return i.device
	}
	return 0
}

func (e *Emulator) newMAC(c *reqCtx, body obj) (int, bool) {
	m := &macAddr{}
	if !c.applyAssigned(body, &m.iface, 0) || !c.applyMAC(m, body, true) {
		return 0, false
	}
	m.id = e.db.next("macaddress")
	m.created = c.touch(time.Time{})
	m.lastUpdated = m.created
	e.db.macs[m.id] = m
	c.enqueue("dcim.macaddress", m.id, "object_created", nil, e.snapMAC(m), nil)
	return m.id, true
}

func (e *Emulator) saveMAC(c *reqCtx, id int, body obj, partial bool) bool {
	m := e.db.macs[id]
	next := *m
	if !c.applyAssigned(body, &next.iface, m.id) || !c.applyMAC(&next, body, !partial) {
		return false
	}
	pre := e.snapMAC(m)
	next.lastUpdated = c.touch(m.lastUpdated)
	*m = next
	c.enqueue("dcim.macaddress", m.id, "object_updated", pre, e.snapMAC(m), nil)
	return true
}

func (e *Emulator) removeMAC(c *reqCtx, id int) bool {
	m := e.db.macs[id]
	for _, i := range e.db.ifaces {
		if i.primaryMAC == m.id {
			i.primaryMAC = 0 // on_delete=SET_NULL: a queryset update, no event
		}
	}
	c.enqueue("dcim.macaddress", m.id, "object_deleted", e.snapMAC(m), nil, e.renderMAC(rc{}, m))
	delete(e.db.macs, m.id)
	return true
}

func (c *reqCtx) applyMAC(m *macAddr, body obj, creating bool) bool {
	if v, ok := body.get("mac_address"); ok {
		s, _ := v.(string)
		canon, valid := canonicalMAC(s)
		if !valid {
			c.invalid(obj{{"mac_address", []any{"Invalid MAC address format: " + pyStr(v)}}})
			return false
		}
		m.mac = canon
	} else if creating {
		c.invalid(obj{{"mac_address", []any{"This field is required."}}})
		return false
	}
	if v, ok := body.get("description"); ok {
		m.description, _ = v.(string)
	}
	return true
}

// applyAssigned reads assigned_object_type/assigned_object_id (only dcim.interface is
// supported). A MAC that is an interface's primary MAC cannot be moved (self is its id).
func (c *reqCtx) applyAssigned(body obj, dst *int, self int) bool {
	t, hasType := body.get("assigned_object_type")
	v, hasID := body.get("assigned_object_id")
	if !hasType && !hasID {
		return true
	}
	if t == nil || v == nil {
		*dst = 0
	} else {
		if t != "dcim.interface" {
			c.invalid(obj{{"assigned_object_type", []any{"The emulator assigns only to dcim.interface."}}})
			return false
		}
		id, msg := relatedID(v, c.e.ifaceExists)
		if msg != "" {
			c.invalid(obj{{"assigned_object_id", []any{msg}}})
			return false
		}
		*dst = id
	}
	if self != 0 {
		for _, i := range c.e.db.ifaces {
			if i.primaryMAC == self && i.id != *dst {
				c.invalid(obj{{"__all__", []any{"Cannot unassign MAC Address while it is designated as the primary MAC for an object"}}})
				return false
			}
		}
	}
	return true
}

func (e *Emulator) newIP(c *reqCtx, body obj) (int, bool) {
	ip := &ipAddr{status: "active"}
	if !c.applyAssigned(body, &ip.iface, 0) || !c.applyIP(ip, body, true) {
		return 0, false
	}
	ip.id = e.db.next("ipaddress")
	ip.created = c.touch(time.Time{})
	ip.lastUpdated = ip.created
	e.db.ips[ip.id] = ip
	c.enqueue("ipam.ipaddress", ip.id, "object_created", nil, e.snapIP(ip), nil)
	return ip.id, true
}

func (e *Emulator) saveIP(c *reqCtx, id int, body obj, partial bool) bool {
	ip := e.db.ips[id]
	next := *ip
	if !c.applyAssigned(body, &next.iface, 0) || !c.applyIP(&next, body, !partial) {
		return false
	}
	pre := e.snapIP(ip)
	next.lastUpdated = c.touch(ip.lastUpdated)
	*ip = next
	c.enqueue("ipam.ipaddress", ip.id, "object_updated", pre, e.snapIP(ip), nil)
	return true
}

func (e *Emulator) removeIP(c *reqCtx, id int) bool {
	ip := e.db.ips[id]
	for _, d := range e.db.devices {
		if d.primaryIP4 == ip.id {
			d.primaryIP4 = 0 // on_delete=SET_NULL
		}
	}
	c.enqueue("ipam.ipaddress", ip.id, "object_deleted", e.snapIP(ip), nil, e.renderIP(rc{}, ip))
	delete(e.db.ips, ip.id)
	return true
}

func (c *reqCtx) applyIP(ip *ipAddr, body obj, creating bool) bool {
	if v, ok := body.get("address"); ok {
		s, _ := v.(string)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			c.invalid(obj{{"address", []any{"Invalid IP address format: " + pyStr(v)}}})
			return false
		}
		ip.address = p
	} else if creating {
		c.invalid(obj{{"address", []any{"This field is required."}}})
		return false
	}
	if v, ok := body.get("status"); ok {
		s, _ := v.(string)
		if _, valid := ipStatusLabels[s]; !valid {
			c.invalid(obj{{"status", []any{`"` + pyStr(v) + `" is not a valid choice.`}}})
			return false
		}
		ip.status = s
	}
	if v, ok := body.get("dns_name"); ok {
		ip.dnsName, _ = v.(string)
	}
	if v, ok := body.get("description"); ok {
		ip.description, _ = v.(string)
	}
	return true
}

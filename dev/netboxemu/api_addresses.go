package netboxemu

import (
	"net/http"
	"net/netip"
	"time"
)

// /api/dcim/mac-addresses/ and /api/ipam/ip-addresses/: objects assigned to an interface
// (assigned_object_type "dcim.interface" and assigned_object_id).

func (e *Emulator) listMACs(c *reqCtx) {
	ids, ok1 := c.intFilter("id")
	devs, ok2 := c.intFilter("device_id")
	ifs, ok3 := c.intFilter("interface_id")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	macs := map[string]bool(nil)
	if raw := c.strFilter("mac_address"); raw != nil {
		macs = map[string]bool{}
		for m := range raw {
			canon, _ := canonicalMAC(m)
			macs[canon] = true
		}
	}
	var match []*macAddr
	keep := func(m *macAddr) bool {
		return pass(ids, m.id) && pass(ifs, m.iface) && pass(devs, e.deviceOf(m.iface)) && pass(macs, m.mac)
	}
	for _, id := range matchingIDs(e.db.macs, keep, macLess) {
		match = append(match, e.db.macs[id])
	}
	c.page(len(match), func(i int) obj { return e.renderMAC(c.rc, match[i]) })
}

// deviceOf is the device an interface belongs to (0 for none).
func (e *Emulator) deviceOf(ifaceID int) int {
	if i, ok := e.db.ifaces[ifaceID]; ok {
		return i.device
	}
	return 0
}

func (c *reqCtx) findMAC() *macAddr {
	id, ok := c.id()
	if !ok {
		return nil
	}
	m, found := c.e.db.macs[id]
	if !found {
		c.detail(http.StatusNotFound, "No MACAddress matches the given query.")
		return nil
	}
	return m
}

func (e *Emulator) getMAC(c *reqCtx) {
	if m := c.findMAC(); m != nil {
		c.w.Header().Set("ETag", etag(m.lastUpdated))
		c.write(http.StatusOK, e.renderMAC(c.rc, m))
	}
}

func (e *Emulator) createMAC(c *reqCtx) {
	body := c.body()
	if body == nil {
		return
	}
	m := &macAddr{}
	if !c.applyAssigned(body, &m.iface, 0) || !c.applyMAC(m, body, true) {
		return
	}
	m.id = e.db.next("macaddress")
	m.created = c.touch(time.Time{})
	m.lastUpdated = m.created
	e.db.macs[m.id] = m
	c.enqueue("dcim.macaddress", m.id, "object_created", nil, e.snapMAC(m), nil)
	c.w.Header().Set("ETag", etag(m.lastUpdated)) // single-object creates carry one (ETagMixin)
	c.write(http.StatusCreated, e.renderMAC(c.rc, m))
}

func (e *Emulator) updateMAC(c *reqCtx) {
	m := c.findMAC()
	if m == nil || !c.ifMatch(m.lastUpdated) {
		return
	}
	body := c.body()
	if body == nil {
		return
	}
	next := *m
	if !c.applyAssigned(body, &next.iface, m.id) || !c.applyMAC(&next, body, false) {
		return
	}
	pre := e.snapMAC(m)
	next.lastUpdated = c.touch(m.lastUpdated)
	*m = next
	c.enqueue("dcim.macaddress", m.id, "object_updated", pre, e.snapMAC(m), nil)
	c.w.Header().Set("ETag", etag(m.lastUpdated))
	c.write(http.StatusOK, e.renderMAC(c.rc, m))
}

func (e *Emulator) deleteMAC(c *reqCtx) {
	m := c.findMAC()
	if m == nil || !c.ifMatch(m.lastUpdated) {
		return
	}
	for _, i := range e.db.ifaces {
		if i.primaryMAC == m.id {
			i.primaryMAC = 0 // on_delete=SET_NULL: a queryset update, no event
		}
	}
	c.enqueue("dcim.macaddress", m.id, "object_deleted", e.snapMAC(m), nil, e.renderMAC(rc{}, m))
	delete(e.db.macs, m.id)
	c.write(http.StatusNoContent, nil)
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

func (e *Emulator) listIPs(c *reqCtx) {
	ids, ok1 := c.intFilter("id")
	devs, ok2 := c.intFilter("device_id")
	ifs, ok3 := c.intFilter("interface_id")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	// address: a value with a mask matches exactly, one without matches the host whatever its
	// mask (NB@v4.6.8:netbox/ipam/filtersets.py filter_address, ipam/lookups.py NetIn).
	addrs := c.strFilter("address")
	var match []*ipAddr
	keep := func(ip *ipAddr) bool {
		return pass(ids, ip.id) && pass(ifs, ip.iface) && pass(devs, e.deviceOf(ip.iface)) &&
			(addrs == nil || addrs[ip.address.String()] || addrs[ip.address.Addr().String()])
	}
	for _, id := range matchingIDs(e.db.ips, keep, func(a, b *ipAddr) bool { return a.address.String() < b.address.String() }) {
		match = append(match, e.db.ips[id])
	}
	c.page(len(match), func(i int) obj { return e.renderIP(c.rc, match[i]) })
}

func (c *reqCtx) findIP() *ipAddr {
	id, ok := c.id()
	if !ok {
		return nil
	}
	ip, found := c.e.db.ips[id]
	if !found {
		c.detail(http.StatusNotFound, "No IPAddress matches the given query.")
		return nil
	}
	return ip
}

func (e *Emulator) getIP(c *reqCtx) {
	if ip := c.findIP(); ip != nil {
		c.w.Header().Set("ETag", etag(ip.lastUpdated))
		c.write(http.StatusOK, e.renderIP(c.rc, ip))
	}
}

func (e *Emulator) createIP(c *reqCtx) {
	body := c.body()
	if body == nil {
		return
	}
	ip := &ipAddr{status: "active"}
	if !c.applyAssigned(body, &ip.iface, 0) || !c.applyIP(ip, body, true) {
		return
	}
	ip.id = e.db.next("ipaddress")
	ip.created = c.touch(time.Time{})
	ip.lastUpdated = ip.created
	e.db.ips[ip.id] = ip
	c.enqueue("ipam.ipaddress", ip.id, "object_created", nil, e.snapIP(ip), nil)
	c.w.Header().Set("ETag", etag(ip.lastUpdated)) // single-object creates carry one (ETagMixin)
	c.write(http.StatusCreated, e.renderIP(c.rc, ip))
}

func (e *Emulator) updateIP(c *reqCtx) {
	ip := c.findIP()
	if ip == nil || !c.ifMatch(ip.lastUpdated) {
		return
	}
	body := c.body()
	if body == nil {
		return
	}
	next := *ip
	if !c.applyAssigned(body, &next.iface, 0) || !c.applyIP(&next, body, false) {
		return
	}
	pre := e.snapIP(ip)
	next.lastUpdated = c.touch(ip.lastUpdated)
	*ip = next
	c.enqueue("ipam.ipaddress", ip.id, "object_updated", pre, e.snapIP(ip), nil)
	c.w.Header().Set("ETag", etag(ip.lastUpdated))
	c.write(http.StatusOK, e.renderIP(c.rc, ip))
}

func (e *Emulator) deleteIP(c *reqCtx) {
	ip := c.findIP()
	if ip == nil || !c.ifMatch(ip.lastUpdated) {
		return
	}
	for _, d := range e.db.devices {
		if d.primaryIP4 == ip.id {
			d.primaryIP4 = 0 // on_delete=SET_NULL
		}
	}
	c.enqueue("ipam.ipaddress", ip.id, "object_deleted", e.snapIP(ip), nil, e.renderIP(rc{}, ip))
	delete(e.db.ips, ip.id)
	c.write(http.StatusNoContent, nil)
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

package netboxemu

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// /api/dcim/interfaces/ and /api/dcim/mac-addresses/ (NetBox ≥ 4.2 MACs are objects of their
// own, NetBox 4.2 release notes #4867; dcim/filtersets.py MACAddressFilterSet). An interface or
// MAC change is an event on that object only.

// relatedID resolves a writable related field given as an id or {"id": n}, with NetBox's
// messages (utilities/api.py get_related_object_by_attrs).
func relatedID(v any, exists func(int) bool) (int, string) {
	if m, ok := v.(map[string]any); ok {
		idv, has := m["id"]
		if !has {
			return 0, fmt.Sprintf("Related object not found using the provided attributes: %s", pyStr(v))
		}
		v = idv
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Sprintf("Related objects must be referenced by numeric ID or by dictionary of attributes. Received an unrecognized value: %s", pyStr(v))
	}
	id, err := strconv.Atoi(string(n))
	if err != nil || !exists(id) {
		return 0, fmt.Sprintf("Related object not found using the provided numeric ID: %s", n)
	}
	return id, ""
}

func (e *Emulator) ifaceExists(id int) bool { _, ok := e.db.ifaces[id]; return ok }

func (e *Emulator) ifaceOrder(a, b *iface) bool {
	da, db := e.db.devices[a.device], e.db.devices[b.device]
	if da.name != db.name {
		return da.name < db.name
	}
	return a.name < b.name
}

func (e *Emulator) newInterface(c *reqCtx, body obj) (int, bool) {
	i := &iface{enabled: true}
	if !c.applyInterface(i, body, true) {
		return 0, false
	}
	i.id = e.db.next("interface")
	i.created = c.touch(time.Time{})
	i.lastUpdated = i.created
	e.db.ifaces[i.id] = i
	c.enqueue("dcim.interface", i.id, "object_created", nil, e.snapInterface(i), nil)
	return i.id, true
}

func (e *Emulator) saveInterface(c *reqCtx, id int, body obj, partial bool) bool {
	i := e.db.ifaces[id]
	next := *i
	if !c.applyInterface(&next, body, !partial) {
		return false
	}
	pre := e.snapInterface(i)
	next.lastUpdated = c.touch(i.lastUpdated)
	*i = next
	c.enqueue("dcim.interface", i.id, "object_updated", pre, e.snapInterface(i), nil)
	return true
}

// removeInterface deletes an interface and, by cascade, its MACs; its IPs become unassigned.
func (e *Emulator) removeInterface(c *reqCtx, i *iface) bool {
	for id, m := range e.db.macs {
		if m.iface == i.id {
			c.enqueue("dcim.macaddress", id, "object_deleted", e.snapMAC(m), nil, e.renderMAC(rc{}, m))
			delete(e.db.macs, id)
		}
	}
	for _, ip := range e.db.ips {
		if ip.iface == i.id {
			ip.iface = 0
			for _, d := range e.db.devices {
				if d.primaryIP4 == ip.id {
					d.primaryIP4 = 0
				}
			}
		}
	}
	c.enqueue("dcim.interface", i.id, "object_deleted", e.snapInterface(i), nil, e.renderInterface(rc{}, i))
	delete(e.db.ifaces, i.id)
	return true
}

func (c *reqCtx) applyInterface(i *iface, body obj, creating bool) bool {
	errs := obj{}
	bad := func(k, msg string) { errs = append(errs, field{k, []any{msg}}) }
	if v, ok := body.get("device"); ok {
		id, msg := relatedID(v, func(id int) bool { _, ok := c.e.db.devices[id]; return ok })
		if msg != "" {
			bad("device", msg)
		}
		i.device = id
	} else if creating {
		bad("device", "This field is required.")
	}
	if v, ok := body.get("name"); ok {
		if s, isStr := v.(string); isStr && s != "" {
			i.name = s
		} else {
			bad("name", "This field may not be blank.")
		}
	} else if creating {
		bad("name", "This field is required.")
	}
	if v, ok := body.get("type"); ok {
		s, _ := v.(string)
		if _, known := interfaceTypeLabels[s]; !known {
			bad("type", `"`+pyStr(v)+`" is not a valid choice.`)
		}
		i.typ = s
	} else if creating {
		bad("type", "This field is required.")
	}
	for _, f := range []struct {
		k   string
		dst *bool
	}{{"enabled", &i.enabled}, {"mgmt_only", &i.mgmtOnly}} {
		if v, ok := body.get(f.k); ok {
			b, isBool := v.(bool)
			if !isBool {
				bad(f.k, "Must be a valid boolean.")
			}
			*f.dst = b
		}
	}
	if v, ok := body.get("description"); ok {
		i.description, _ = v.(string)
	}
	if v, ok := body.get("primary_mac_address"); ok {
		i.primaryMAC = 0
		if v != nil {
			id, msg := relatedID(v, func(id int) bool { _, ok := c.e.db.macs[id]; return ok })
			if msg != "" {
				bad("primary_mac_address", msg)
			} else if c.e.db.macs[id].iface != i.id {
				bad("primary_mac_address", "MAC address "+c.e.db.macs[id].mac+" is not assigned to this interface.")
			}
			i.primaryMAC = id
		}
	}
	if len(errs) > 0 {
		c.invalid(errs)
		return false
	}
	return true
}

// canonicalMAC parses a MAC in the forms NetBox accepts and renders it as NetBox does
// (uppercase, colon-separated: mac_unix_expanded_uppercase).
func canonicalMAC(s string) (string, bool) {
	t := strings.NewReplacer("-", "", ":", "", ".", "").Replace(strings.TrimSpace(s))
	if len(t) != 12 {
		return "", false
	}
	if _, err := strconv.ParseUint(t, 16, 64); err != nil {
		return "", false
	}
	t = strings.ToUpper(t)
	return t[0:2] + ":" + t[2:4] + ":" + t[4:6] + ":" + t[6:8] + ":" + t[8:10] + ":" + t[10:12], true
}

package netboxemu

import (
	"net/http"
	"strings"
	"time"
)

// /api/dcim/devices/ — NetBox 4.6.8's DeviceViewSet (with ETagMixin,
// NB@v4.6.8:netbox/netbox/api/viewsets/__init__.py): the writes; res_dcim.go declares the resource.

// ifMatch is ETagMixin._validate_etag: with If-Match (other than *) the current ETag must be
// one of the listed ones, compared as strings; otherwise 412 with the current ETag.
func (c *reqCtx) ifMatch(lastUpdated time.Time) bool {
	h := c.r.Header.Get("If-Match")
	if h == "" || h == "*" {
		return true
	}
	current := etag(lastUpdated)
	for _, t := range strings.Split(h, ",") {
		if strings.TrimSpace(t) == current {
			return true
		}
	}
	c.w.Header().Set("ETag", current)
	c.detail(http.StatusPreconditionFailed, "Precondition failed.")
	return false
}

// touch returns the new last_updated of an object saved now: the clock's time, moved forward
// by a microsecond when needed so that every save changes the ETag, as in NetBox.
func (c *reqCtx) touch(prev time.Time) time.Time {
	now := c.now()
	if !now.After(prev) {
		now = prev.Add(time.Microsecond)
	}
	c.touched = now
	return now
}

func (e *Emulator) saveDevice(c *reqCtx, id int, body obj, partial bool) bool {
	d := e.db.devices[id]
	next := *d
	if !c.applyDevice(&next, body, partial, false) {
		return false
	}
	pre := e.snapDevice(d)
	next.lastUpdated = c.touch(d.lastUpdated)
	*d = next
	c.enqueue("dcim.device", d.id, "object_updated", pre, e.snapDevice(d), nil)
	return true
}

func (e *Emulator) newDevice(c *reqCtx, body obj) (int, bool) {
	d := &device{status: "active"}
	if !c.applyDevice(d, body, false, true) {
		return 0, false
	}
	d.id = e.db.next("device")
	d.created = c.touch(time.Time{})
	d.lastUpdated = d.created
	e.db.devices[d.id] = d
	c.enqueue("dcim.device", d.id, "object_created", nil, e.snapDevice(d), nil)
	return d.id, true
}

// removeDevice deletes a device with its interfaces (and their MACs) and journal entries.
func (e *Emulator) removeDevice(c *reqCtx, id int) bool {
	d := e.db.devices[id]
	for _, iid := range sortedIDs(e.db.ifaces, func(a, b *iface) bool { return a.name < b.name }) {
		if i := e.db.ifaces[iid]; i.device == d.id {
			e.removeInterface(c, i)
		}
	}
	for _, jid := range sortedIDs(e.db.journal, byID[*journalEntry]) {
		if j := e.db.journal[jid]; j.objType == "dcim.device" && j.objID == d.id {
			c.enqueue("extras.journalentry", jid, "object_deleted", e.snapJournal(j), nil, e.renderJournal(rc{}, j))
			delete(e.db.journal, jid)
		}
	}
	c.enqueue("dcim.device", d.id, "object_deleted", e.snapDevice(d), nil, e.renderDevice(rc{}, d, false))
	delete(e.db.devices, d.id)
	return true
}

// applyDevice is DeviceSerializer's validation and ValidatedModelSerializer.validate for the
// fields the emulator supports (other keys are ignored, as DRF ignores unknown input). partial
// is PATCH; creating fills custom-field defaults when custom_fields is omitted. It answers 400
// and returns false on any error.
func (c *reqCtx) applyDevice(d *device, body obj, partial, creating bool) bool {
	errs := obj{}
	bad := func(k string, msg any) { errs = append(errs, field{k, msg}) }
	has := func(k string) (any, bool) { return body.get(k) }
	if v, ok := has("name"); ok {
		if s, isStr := v.(string); isStr && s != "" {
			d.name = s
		} else {
			bad("name", []any{"This field may not be blank."})
		}
	} else if creating {
		bad("name", []any{"This field is required."})
	}
	for _, fk := range []struct {
		key   string
		dst   *int
		exist func(int) bool
	}{
		{"device_type", &d.deviceType, func(id int) bool { _, ok := c.e.db.deviceTypes[id]; return ok }},
		{"role", &d.role, func(id int) bool { _, ok := c.e.db.roles[id]; return ok }},
		{"site", &d.site, func(id int) bool { _, ok := c.e.db.sites[id]; return ok }},
	} {
		v, ok := has(fk.key)
		if !ok {
			if !partial {
				bad(fk.key, []any{"This field is required."})
			}
			continue
		}
		if id, msg := relatedID(v, fk.exist); msg != "" {
			bad(fk.key, []any{msg})
		} else {
			*fk.dst = id
		}
	}
	c.applyDeviceScalars(d, body, bad)
	if v, ok := has("primary_ip4"); ok {
		if v == nil {
			d.primaryIP4 = 0
		} else if id, msg := relatedID(v, func(id int) bool { _, ok := c.e.db.ips[id]; return ok }); msg != "" {
			bad("primary_ip4", []any{msg})
		} else {
			d.primaryIP4 = id
		}
	}
	cfIn, cfGiven := has("custom_fields")
	if cfGiven {
		merged, cfErr := c.e.mergeCFs("dcim.device", d.cf, cfIn)
		if cfErr != nil {
			bad("custom_fields", cfErr)
		}
		d.cf = merged
	} else if creating {
		d.cf = map[string]any{}
		for _, cf := range c.e.db.cfsFor("dcim.device") {
			d.cf[cf.name] = cf.def
		}
	}
	if len(errs) > 0 {
		c.invalid(errs)
		return false
	}
	return c.cleanDevice(d)
}

func (c *reqCtx) applyDeviceScalars(d *device, body obj, bad func(string, any)) {
	if v, ok := body.get("status"); ok {
		s, isStr := v.(string)
		if _, valid := deviceStatusLabels[s]; !isStr || !valid {
			bad("status", []any{`"` + pyStr(v) + `" is not a valid choice.`})
		} else {
			d.status = s
		}
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"serial", &d.serial}, {"description", &d.description}, {"comments", &d.comments}} {
		if v, ok := body.get(f.key); ok {
			if s, isStr := v.(string); isStr {
				*f.dst = s
			} else {
				bad(f.key, []any{"Not a valid string."})
			}
		}
	}
	if v, ok := body.get("asset_tag"); ok {
		if s, isStr := v.(string); isStr && s != "" {
			d.assetTag = &s
		} else {
			d.assetTag = nil
		}
	}
}

// cleanDevice is Device.full_clean: custom fields, the primary IP's assignment, name uniqueness.
func (c *reqCtx) cleanDevice(d *device) bool {
	cf, msg := c.e.cleanCFs("dcim.device", d.cf)
	if msg != "" {
		c.invalid(obj{{"__all__", []any{msg}}})
		return false
	}
	d.cf = cf
	if ip, ok := c.e.db.ips[d.primaryIP4]; ok {
		if i, assigned := c.e.db.ifaces[ip.iface]; !assigned || i.device != d.id {
			c.invalid(obj{{"primary_ip4", []any{"The specified IP address (" + ip.address.String() + ") is not assigned to this device."}}})
			return false
		}
		if !ip.address.Addr().Is4() {
			c.invalid(obj{{"primary_ip4", []any{"Primary IPv4 address must be an IPv4 address."}}})
			return false
		}
	}
	for _, other := range c.e.db.devices {
		if other.id != d.id && other.name == d.name && other.site == d.site {
			c.invalid(obj{{"__all__", []any{"Device name must be unique per site."}}})
			return false
		}
	}
	return true
}

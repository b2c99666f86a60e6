package netboxemu

// index holds the counts and reverse relations that rendering a list needs, computed once per
// list request instead of once per object (a list of 1,000 devices would otherwise be
// quadratic). It lives in Emulator.ix only while a list is rendered, under Emulator.mu.
type index struct {
	ifacesByDevice map[int]int
	devicesByType  map[int]int
	macsByIface    map[int][]*macAddr
	ipsByIface     map[int]int
}

func (e *Emulator) buildIndex() *index {
	ix := &index{ifacesByDevice: map[int]int{}, devicesByType: map[int]int{},
		macsByIface: map[int][]*macAddr{}, ipsByIface: map[int]int{}}
	for _, i := range e.db.ifaces {
		ix.ifacesByDevice[i.device]++
	}
	for _, d := range e.db.devices {
		ix.devicesByType[d.deviceType]++
	}
	for _, id := range sortedIDs(e.db.macs, macLess) {
		m := e.db.macs[id]
		ix.macsByIface[m.iface] = append(ix.macsByIface[m.iface], m)
	}
	for _, ip := range e.db.ips {
		ix.ipsByIface[ip.iface]++
	}
	return ix
}

// indexFrom is how many objects a list page must render for the index to pay for itself: a
// page of one or two objects (fleetd reads one device's interfaces) counts per object instead.
const indexFrom = 8

// withIndex runs fn with the index in place.
func (e *Emulator) withIndex(fn func()) {
	e.ix = e.buildIndex()
	defer func() { e.ix = nil }()
	fn()
}

func (e *Emulator) interfaceCount(device int) int {
	if e.ix != nil {
		return e.ix.ifacesByDevice[device]
	}
	n := 0
	for _, i := range e.db.ifaces {
		if i.device == device {
			n++
		}
	}
	return n
}

func (e *Emulator) deviceTypeCount(t int) int {
	if e.ix != nil {
		return e.ix.devicesByType[t]
	}
	n := 0
	for _, d := range e.db.devices {
		if d.deviceType == t {
			n++
		}
	}
	return n
}

func (e *Emulator) macsOf(iface int) []*macAddr {
	if e.ix != nil {
		return e.ix.macsByIface[iface]
	}
	var out []*macAddr
	for _, id := range matchingIDs(e.db.macs, func(m *macAddr) bool { return m.iface == iface }, macLess) {
		out = append(out, e.db.macs[id])
	}
	return out
}

func (e *Emulator) ipCount(iface int) int {
	if e.ix != nil {
		return e.ix.ipsByIface[iface]
	}
	n := 0
	for _, ip := range e.db.ips {
		if ip.iface == iface {
			n++
		}
	}
	return n
}

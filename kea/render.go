// Package kea keeps Kea's DHCPv4 host reservations in step with NetBox (docs/design.md §7): one
// reservation per device with a MAC, written atomically to the file a Kea subnet includes, and a
// config-reload through Kea's control socket when the content changed.
//
// The file holds a whole JSON array, so the Kea configuration includes it as the value of a
// subnet's "reservations" key:
//
//	"reservations": <?include "/var/lib/kea/fleet/reservations.json"?>
//
// (examples/kea/kea-dhcp4.conf). Kea refuses a whole configuration over one bad reservation (an
// address outside the subnet, a MAC or address reserved twice), so devices that would cause that
// are left out and reported instead.
package kea

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/folly-infra/fleetd/fleet"
)

// Reservation is one host reservation in a Kea subnet (Dhcp4 subnet4[].reservations[]).
type Reservation struct {
	HWAddress string `json:"hw-address"` // lowercase, colon-separated
	IPAddress string `json:"ip-address"`
	Hostname  string `json:"hostname,omitempty"`
}

// SkipReason says why a device got no reservation.
type SkipReason string

const (
	// SkipNoMAC and SkipNoIPv4 are ordinary: most NetBox devices that are not machines
	// (switches, PDUs) have no MAC or no address.
	SkipNoMAC  SkipReason = "no-mac"
	SkipNoIPv4 SkipReason = "no-ipv4"
	// The others are declaration mistakes the owner should fix in NetBox.
	SkipBadMAC        SkipReason = "bad-mac"
	SkipOutsideSubnet SkipReason = "outside-subnet"
	SkipDuplicateMAC  SkipReason = "duplicate-mac"
	SkipDuplicateIP   SkipReason = "duplicate-ip"
)

// Ordinary reports whether the reason is expected for devices that are not DHCP clients, as
// opposed to a mistake in NetBox worth a warning.
func (r SkipReason) Ordinary() bool { return r == SkipNoMAC || r == SkipNoIPv4 }

// Skipped is a device left out of the reservations.
type Skipped struct {
	DeviceID int64
	Device   string
	Reason   SkipReason
	Detail   string // one sentence naming the values involved
}

// hostnameRE is what Kea may hand out as a host name: dot-separated DNS labels.
var hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// Plan decides the reservations for devices. When subnet is valid, devices whose address lies
// outside it are skipped (Kea would reject the whole configuration). When two devices claim the
// same MAC or address, the one with the lower NetBox id (declared first) keeps it. Reservations
// are ordered by address; skipped devices by name.
func Plan(devices []fleet.Device, subnet netip.Prefix) ([]Reservation, []Skipped) {
	// Sorted by reference: a copy of 1,000 devices would be a megabyte held while the file is
	// written (docs/operate.md, "Memory").
	byID := make([]*fleet.Device, len(devices))
	for i := range devices {
		byID[i] = &devices[i]
	}
	slices.SortFunc(byID, func(a, b *fleet.Device) int { return cmp.Or(cmp.Compare(a.ID, b.ID), strings.Compare(a.Name, b.Name)) })
	var (
		kept    = make([]candidate, 0, len(devices))
		skipped []Skipped
		macs    = make(map[fleet.MAC]string, len(devices)) // hw-address → device name
		ips     = make(map[netip.Addr]string, len(devices))
	)
	for _, d := range byID {
		c, s := consider(d, subnet)
		switch {
		case s != nil:
		case macs[c.mac] != "":
			s = skip(d, SkipDuplicateMAC, "%s's MAC %s is already reserved for %s", d.Name, c.mac, macs[c.mac])
		case ips[c.ip] != "":
			s = skip(d, SkipDuplicateIP, "%s's address %s is already reserved for %s", d.Name, c.ip, ips[c.ip])
		}
		if s != nil {
			skipped = append(skipped, *s)
			continue
		}
		macs[c.mac], ips[c.ip] = d.Name, d.Name
		kept = append(kept, c)
	}
	slices.SortFunc(kept, func(a, b candidate) int { return a.ip.Compare(b.ip) })
	res := make([]Reservation, len(kept))
	for i, k := range kept {
		res[i] = k.res
	}
	slices.SortFunc(skipped, func(a, b Skipped) int {
		return cmp.Or(strings.Compare(a.Device, b.Device), cmp.Compare(a.DeviceID, b.DeviceID))
	})
	return res, skipped
}

// candidate is a device that can have a reservation on its own (before duplicates are checked).
type candidate struct {
	mac fleet.MAC
	ip  netip.Addr
	res Reservation
}

// consider checks one device on its own: a MAC, an IPv4 address, inside the subnet.
func consider(d *fleet.Device, subnet netip.Prefix) (candidate, *Skipped) {
	if d.PrimaryMAC() == "" {
		return candidate{}, skip(d, SkipNoMAC, "%s has no MAC address", d.Name)
	}
	mac, err := fleet.ParseMAC(string(d.PrimaryMAC())) // Kea's form: lowercase, colon-separated
	if err != nil {
		return candidate{}, skip(d, SkipBadMAC, "%s: %v", d.Name, err)
	}
	ip := d.IP()
	if !ip.Is4() {
		return candidate{}, skip(d, SkipNoIPv4, "%s has no primary IPv4 address", d.Name)
	}
	if subnet.IsValid() && !subnet.Contains(ip) {
		return candidate{}, skip(d, SkipOutsideSubnet, "%s's address %s is outside the Kea subnet %s", d.Name, ip, subnet)
	}
	r := Reservation{HWAddress: string(mac), IPAddress: ip.String()}
	if h := strings.ToLower(d.Name); hostnameRE.MatchString(h) {
		r.Hostname = h
	}
	return candidate{mac: mac, ip: ip, res: r}, nil
}

func skip(d *fleet.Device, r SkipReason, format string, args ...any) *Skipped {
	return &Skipped{DeviceID: d.ID, Device: d.Name, Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Marshal encodes reservations as the file's content.
func Marshal(res []Reservation) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("[")
	for i, r := range res {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode reservation for %s: %w", r.HWAddress, err)
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.Write(line)
	}
	if len(res) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	return b.Bytes(), nil
}

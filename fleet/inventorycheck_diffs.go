package fleet

import (
	"cmp"
	"context"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"slices"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/attest"
)

// provedDifferences compares what the TPM proved with the declaration and with the identity
// fleetd issued: the EK (declared in ek_sha256; the one the certificates were issued for) and the
// TPM the declaration describes (tpm, ek_certificate).
func provedDifferences(d Device, p layout.ProvedFacts, seen time.Time) []Difference {
	if p.EKSHA256 == "" {
		return nil
	}
	diff := func(kind DifferenceKind, format string, args ...any) Difference {
		return Difference{Kind: kind, At: seen, Source: p.Source, Detail: fmt.Sprintf(format, args...)}
	}
	var out []Difference
	switch id := d.Owned.Identity; {
	case !slices.Contains(d.Declared.EKHashes, p.EKSHA256):
		out = append(out, diff(DiffEK, "the machine proved EK %.16s…, which ek_sha256 does not declare (%s): its TPM changed, or the declaration did",
			p.EKSHA256, listOr(shortHashes(d.Declared.EKHashes), "none declared")))
	case !id.Empty() && id.EKSHA256 != "" && id.EKSHA256 != p.EKSHA256:
		out = append(out, diff(DiffEK, "the machine proved EK %.16s…, and its certificates were issued at %s for EK %.16s…: they belong to another TPM; provision the device again",
			p.EKSHA256, stamp(id.Issued), id.EKSHA256))
	}
	if d.Declared.TPM == TPM12 {
		out = append(out, diff(DiffTPM, "tpm declares 1.2, and the machine proved a TPM %s (EK %.16s…)", cmp.Or(p.TPMVersion, attest.TPMVersion20), p.EKSHA256))
	}
	if d.Declared.EKCert == EKCertNone && p.EKIssuer != "" {
		out = append(out, diff(DiffTPM, "ek_certificate declares none, and the machine's TPM has an EK certificate issued by %q", p.EKIssuer))
	}
	return out
}

// claimedDifferences compares what the agent said with the declaration (the disk_serial found
// exactly once, a declared MAC) and with the identity fleetd issued (the SMBIOS UUID attested then).
func claimedDifferences(d Device, c layout.ClaimedFacts, seen time.Time) []Difference {
	diff := func(kind DifferenceKind, format string, args ...any) Difference {
		return Difference{Kind: kind, At: seen, Source: c.Source, Detail: fmt.Sprintf(format, args...)}
	}
	var out []Difference
	if want := strings.TrimSpace(d.Declared.DiskSerial); want != "" && c.DisksFound > 0 {
		var serials, paths []string
		for _, disk := range c.Disks {
			serials = append(serials, fmt.Sprintf("%q", disk.Serial))
			if strings.TrimSpace(disk.Serial) == want {
				paths = append(paths, disk.Path)
			}
		}
		switch {
		case len(paths) == 0 && c.DisksFound == len(c.Disks):
			out = append(out, diff(DiffDiskNotFound, "disk_serial %q is not among the %d disks the machine reported (serials %s): a provision, wipe or retirement would be refused before anything is wiped",
				want, c.DisksFound, strings.Join(serials, ", ")))
		case len(paths) > 1:
			out = append(out, diff(DiffDiskTwice, "disk_serial %q is on %d of the machine's disks (%s): fleetd refuses to choose, so nothing can be wiped",
				want, len(paths), strings.Join(paths, ", ")))
		}
	}
	if c.MAC != "" && !slices.Contains(d.MACs, MAC(c.MAC)) {
		out = append(out, diff(DiffMAC, "the machine reported MAC %s, which NetBox does not declare (%s): Kea reserves its address and Tinkerbell netboots it by the declared MAC only",
			c.MAC, listOr(macStrings(d.MACs), "no MAC declared")))
	}
	if id := d.Owned.Identity; c.SMBIOSUUIDSHA256 != "" && !id.Empty() && id.UUIDSHA256 != "" && id.UUIDSHA256 != c.SMBIOSUUIDSHA256 {
		out = append(out, diff(DiffUUID, "the machine's SMBIOS UUID (SHA-256 %.16s…) is not the one attested when its identity was issued at %s (%.16s…): another board answers for this device",
			c.SMBIOSUUIDSHA256, stamp(id.Issued), id.UUIDSHA256))
	}
	return out
}

// recordDifferences are what fleetd's own records say of an active node: boot checks that
// stopped, and a current certificate close to its NotAfter that was not renewed (the alert
// FleetdCertExpiring's rule: less than a quarter of the time from its renewal point to its
// NotAfter left).
func (s *Review) recordDifferences(d Device, now time.Time) []Difference {
	if d.Status != StatusActive || d.Owned.State != StateActive {
		return nil
	}
	var out []Difference
	window := s.window
	switch last, id := d.Owned.LastBootCheck, d.Owned.Identity; {
	case !last.IsZero() && now.Sub(last) > window:
		out = append(out, Difference{Kind: DiffBootChecksStopped, At: last.UTC(), Source: "last_boot_check",
			Detail: fmt.Sprintf("the device is active, and its last accepted boot check was %s ago, longer than %s (three hourly checks missed): check the node and its boot-check timer",
				now.Sub(last).Round(time.Minute), window)})
	case last.IsZero() && !id.Empty() && now.Sub(id.Issued) > window:
		out = append(out, Difference{Kind: DiffBootChecksStopped, At: id.Issued.UTC(), Source: "fleet_identity",
			Detail: fmt.Sprintf("the device is active and has sent no accepted boot check since its attestation %s ago: check that its boot-check timer was installed",
				now.Sub(id.Issued).Round(time.Minute))})
	}
	ldevid, lak := certTimes(s.attest.Issuer, d)
	for _, c := range []struct {
		name  string
		times CertTimes
	}{{"LDevID", ldevid}, {"LAK", lak}} {
		t := c.times
		if t.NotAfter.IsZero() || t.RenewAfter.IsZero() || t.NotAfter.Sub(now) >= t.NotAfter.Sub(t.RenewAfter)/4 {
			continue
		}
		what := fmt.Sprintf("lapses in %s, at %s", t.NotAfter.Sub(now).Round(time.Second), stamp(t.NotAfter))
		if !now.Before(t.NotAfter) {
			what = "lapsed at " + stamp(t.NotAfter)
		}
		out = append(out, Difference{Kind: DiffCertExpiring, At: t.RenewAfter, Source: "certificate",
			Detail: fmt.Sprintf("the %s certificate %s and was not renewed since its renewal point: the node's boot-check log says why", c.name, what)})
	}
	return out
}

// declarationChange is the last change of a device's declaration the change log shows.
type declarationChange struct {
	at time.Time
	by string
}

// declarationChanges reads when each device's declaration last changed after since: the saves
// of the device that changed what the owner declares (fleet_class, disk_serial, ek_sha256, tpm,
// ek_certificate; never desired_action, a request), and the saves of MAC addresses whose value
// before or after is one the device declares or reported. fleetd writes none of these, so its
// own saves (which touch the device's last_updated) are left out of the read when
// netbox.service_user is set and change nothing when it is not (docs/design.md §10).
func (s *Review) declarationChanges(ctx context.Context, since time.Time, devices []Device) (map[int64]declarationChange, error) {
	out := map[int64]declarationChange{}
	if !since.Before(s.core.clock.Now()) {
		return out, nil // no facts: nothing to be stale
	}
	q := ChangeQuery{Since: since, ExceptUser: s.serviceUser}
	note := func(id int64, at time.Time, by string) {
		if at.After(out[id].at) {
			out[id] = declarationChange{at: at.UTC(), by: by}
		}
	}
	saves, err := s.changes.DeviceChanges(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read NetBox's change log of devices since %s: %w: %w", stamp(since), ErrChangeLog, err)
	}
	for _, ch := range saves {
		if declarationDiffers(ch.Before.Declared, ch.After.Declared) {
			note(ch.DeviceID, ch.Time, ch.User)
		}
	}
	macs, err := s.changes.MACChanges(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read NetBox's change log of MAC addresses since %s: %w: %w", stamp(since), ErrChangeLog, err)
	}
	for _, d := range devices {
		mine := append(macStrings(d.MACs), d.Owned.Facts.Claimed.MAC)
		for _, ch := range macs {
			if slices.Contains(mine, ch.Before) && ch.Before != "" || slices.Contains(mine, ch.After) && ch.After != "" {
				note(d.ID, ch.Time, ch.User)
			}
		}
	}
	return out, nil
}

// declarationDiffers reports whether a save changed what the owner declares of the machine.
func declarationDiffers(a, b Declaration) bool {
	return a.Class != b.Class || a.DiskSerial != b.DiskSerial || !slices.Equal(a.EKHashes, b.EKHashes) ||
		a.TPM != b.TPM || a.EKCert != b.EKCert
}

func macStrings(ms []MAC) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

func shortHashes(hs []string) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%.16s…", h)
	}
	return out
}

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

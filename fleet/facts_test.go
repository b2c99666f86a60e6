package fleet

import (
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/attest"
)

// TestClaimedFacts: what the agent claims is kept checked and capped; a claim fleetd would not
// keep is refused with claim_malformed and a message naming it, never stored cut.
func TestClaimedFacts(t *testing.T) {
	disk := attest.Disk{Serial: "SER-A", Path: "/dev/disk/by-id/virtio-SER-A"}
	many := make([]attest.Disk, layout.MaxFactDisks+6)
	for i := range many {
		many[i] = attest.Disk{Serial: fmt.Sprint("S", i), Path: fmt.Sprint("/dev/disk/by-id/virtio-S", i)}
	}
	for _, r := range []struct {
		name string
		in   ClaimedHardware
		want string // the refusal's message, "" for accepted
	}{
		{name: "ok/mac in upper case with dashes is kept canonical", in: ClaimedHardware{SMBIOSUUID: "4C4C4544-0042", MAC: "52-54-00-12-34-5A", Disks: []attest.Disk{disk}}},
		{name: "ok/no mac: an older agent", in: ClaimedHardware{Disks: []attest.Disk{disk}}},
		{name: "ok/70 disks: 64 kept, 70 found", in: ClaimedHardware{Disks: many}},
		{name: "refuse/mac not a mac", in: ClaimedHardware{MAC: "52:54:00:12:34"}, want: `the claimed MAC "52:54:00:12:34" is not a MAC`},
		{name: "refuse/mac of 60 KiB", in: ClaimedHardware{MAC: strings.Repeat("a", 60<<10)}, want: "is not a MAC"},
		{name: "refuse/serial too long", in: ClaimedHardware{Disks: []attest.Disk{disk, {Serial: strings.Repeat("s", 200), Path: "/dev/x"}}},
			want: "a disk serial is 200 bytes, more than 128"},
		{name: "refuse/serial with a newline", in: ClaimedHardware{Disks: []attest.Disk{{Serial: "SER\nfleet_state: active", Path: "/dev/x"}}},
			want: "control characters"},
		{name: "refuse/path too long", in: ClaimedHardware{Disks: []attest.Disk{{Serial: "S", Path: "/" + strings.Repeat("p", 300)}}},
			want: "a disk path is 301 bytes, more than 256"},
	} {
		t.Run(r.name, func(t *testing.T) {
			got, err := claimedFacts(r.in)
			if r.want != "" {
				ar, ok := attest.AsRefusal(err)
				if !ok || ar.Check != attest.CheckClaimMalformed || !strings.Contains(ar.Msg, r.want) {
					t.Fatalf("err = %v, want claim_malformed with %q", err, r.want)
				}
				if len(ar.Msg) > 200 {
					t.Errorf("the refusal quotes %d bytes of the claim", len(ar.Msg))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.Since, got.Source = time.Now(), layout.FactsFromBootCheck
			if cerr := (layout.Facts{Version: layout.FactsVersion, Claimed: got}).Check(); cerr != nil {
				t.Errorf("the kept claims fail their own check: %v", cerr)
			}
			if got.DisksFound != len(r.in.Disks) || len(got.Disks) != min(len(r.in.Disks), layout.MaxFactDisks) {
				t.Errorf("disks: %d kept of %d found, claimed %d", len(got.Disks), got.DisksFound, len(r.in.Disks))
			}
			if r.in.MAC != "" && got.MAC != "52:54:00:12:34:5a" {
				t.Errorf("mac = %q, want the canonical form", got.MAC)
			}
			if r.in.SMBIOSUUID != "" && got.SMBIOSUUIDSHA256 != UUIDHash("4c4c4544-0042") {
				t.Errorf("smbios_uuid_sha256 = %q, want the hash of the lowercase UUID", got.SMBIOSUUIDSHA256)
			}
		})
	}
}

// TestNextFacts: at a boot check Since moves only when a half's values change, and nothing is
// written when nothing changed; an enrollment starts both halves again; a check that claims
// nothing keeps the claimed half.
func TestNextFacts(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	proved := layout.ProvedFacts{EKSHA256: strings.Repeat("ab", 32), BootState: strings.Repeat("cd", 32)}
	claimed := layout.ClaimedFacts{MAC: "52:54:00:12:34:56", Disks: []layout.FactDisk{{Serial: "SER-A"}}, DisksFound: 1}
	cur, changed := nextFacts(layout.Facts{}, &proved, &claimed, t0, layout.FactsFromEnrollment)
	if !changed || !cur.Proved.Since.Equal(t0) || cur.Claimed.Source != layout.FactsFromEnrollment || cur.Check() != nil {
		t.Fatalf("first facts = %+v, changed %v, check %v", cur, changed, cur.Check())
	}
	if same, changed := nextFacts(cur, &proved, &claimed, t1, layout.FactsFromBootCheck); changed || !same.Equal(cur) {
		t.Errorf("the same values at t1: changed %v, facts %+v", changed, same)
	}
	if kept, changed := nextFacts(cur, &proved, nil, t1, layout.FactsFromBootCheck); changed || !kept.Equal(cur) {
		t.Errorf("no claims at t1: changed %v, facts %+v", changed, kept)
	}
	// An enrollment (the next request's) starts both halves again, found the same or not: facts
	// it saw after a declaration change must not stay stale behind it.
	if again, changed := nextFacts(cur, &proved, &claimed, t1, layout.FactsFromEnrollment); !changed || !again.Proved.Since.Equal(t1) ||
		!again.Claimed.Since.Equal(t1) || !again.Proved.SameValues(proved) || !again.Claimed.SameValues(claimed) {
		t.Errorf("the same values from an enrollment at t1: changed %v, facts %+v; want both halves since t1", changed, again)
	}
	swapped := claimed
	swapped.Disks = []layout.FactDisk{{Serial: "SER-B"}}
	next, changed := nextFacts(cur, &proved, &swapped, t1, layout.FactsFromBootCheck)
	if !changed || !next.Claimed.Since.Equal(t1) || next.Claimed.Source != layout.FactsFromBootCheck || !next.Proved.Since.Equal(t0) ||
		next.Claimed.Disks[0].Serial != "SER-B" {
		t.Errorf("a swapped disk at t1 = %+v, changed %v; want claimed since t1, proved still since t0", next, changed)
	}
}

// TestBootCheckProved: a boot check proves the boot state again for the EK the enrollment
// proved (or, before fleet_facts, the identity's), keeps the enrollment's TPM facts, and fills a
// TPM version the facts lack with 2.0: its quote came from the LAK, a restricted TPM 2.0 key.
func TestBootCheckProved(t *testing.T) {
	ek, other := strings.Repeat("ab", 32), strings.Repeat("ef", 32)
	vb := &attest.VerifiedBoot{BaselineText: "fleetd-baseline/1\n"}
	enrolled := layout.ProvedFacts{EKSHA256: ek, EKIssuer: "CN=vendor", TPMManufacturer: "00001014", TPMVersion: "2.0 level 0 revision 1.64",
		BootState: strings.Repeat("00", 32), BootPolicy: "hookos", Learned: layout.Learned{Since: time.Unix(1, 0), Source: layout.FactsFromEnrollment}}
	withFacts := func(p layout.ProvedFacts) Device {
		var d Device
		d.Owned.Facts.Proved = p
		d.Owned.Identity.EKSHA256 = other
		return d
	}
	unversioned := enrolled
	unversioned.TPMVersion = ""
	var identityOnly Device
	identityOnly.Owned.Identity.EKSHA256 = other
	for _, r := range []struct {
		name        string
		d           Device
		ek, version string
	}{
		{"ok/the-enrollment's-tpm-facts-kept", withFacts(enrolled), ek, "2.0 level 0 revision 1.64"},
		{"ok/facts-from-before-tpm_version", withFacts(unversioned), ek, "2.0"},
		{"ok/identity-from-before-fleet_facts", identityOnly, other, "2.0"},
	} {
		t.Run(r.name, func(t *testing.T) {
			p := bootCheckProved(r.d, vb)
			if p == nil || p.EKSHA256 != r.ek || p.TPMVersion != r.version || p.BootState != bootState(vb) || p.BootPolicy != "" ||
				!p.Since.IsZero() || p.Source != "" {
				t.Fatalf("bootCheckProved = %+v, want EK %.8s…, tpm_version %q, the boot's state, no boot policy, no since", p, r.ek, r.version)
			}
			if r.d.Owned.Facts.Proved.EKIssuer != "" && (p.EKIssuer != enrolled.EKIssuer || p.TPMManufacturer != enrolled.TPMManufacturer) {
				t.Errorf("the enrollment's EK issuer and manufacturer were not kept: %+v", p)
			}
		})
	}
	if p := bootCheckProved(Device{}, vb); p != nil {
		t.Errorf("a device without a known EK: %+v, want nil", p)
	}
}

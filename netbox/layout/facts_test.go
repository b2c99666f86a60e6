package layout_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/netbox/layout"
)

var (
	factsHash  = strings.Repeat("ab", 32)
	factsSince = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
)

func goodFacts() layout.Facts {
	return layout.Facts{Version: layout.FactsVersion,
		Proved: layout.ProvedFacts{EKSHA256: factsHash, EKIssuer: "CN=Test EK CA", TPMManufacturer: "IBM", TPMVersion: "1.2",
			BootState: strings.Repeat("cd", 32), BootPolicy: "hookos-v0.10", Learned: layout.Learned{Since: factsSince, Source: layout.FactsFromEnrollment}},
		Claimed: layout.ClaimedFacts{SMBIOSUUIDSHA256: factsHash, Disks: []layout.FactDisk{{Serial: "SER-A", Path: "/dev/disk/by-id/virtio-SER-A"}},
			DisksFound: 1, MAC: "52:54:00:12:34:56", Learned: layout.Learned{Since: factsSince, Source: layout.FactsFromBootCheck}},
	}
}

// TestDecodeFacts: facts fleetd wrote read back as written; null and absent are no facts; every
// malformed value is no facts with a reason that names what is wrong, never a panic.
func TestDecodeFacts(t *testing.T) {
	good := goodFacts()
	raw, _ := json.Marshal(good)
	got, err := layout.DecodeFacts(raw)
	if err != nil || !got.Equal(good) {
		t.Fatalf("DecodeFacts(fleetd's own) = %+v, %v; want %+v", got, err, good)
	}
	if diff := cmp.Diff(good, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, raw := range []string{"", "null"} {
		if f, err := layout.DecodeFacts([]byte(raw)); err != nil || !f.Empty() {
			t.Errorf("DecodeFacts(%q) = %+v, %v; want no facts, no error", raw, f, err)
		}
	}
	tooMany := goodFacts()
	for i := range layout.MaxFactDisks + 1 {
		tooMany.Claimed.Disks = append(tooMany.Claimed.Disks, layout.FactDisk{Serial: fmt.Sprint("S", i)})
	}
	tooMany.Claimed.DisksFound = len(tooMany.Claimed.Disks)
	mod := func(f func(*layout.Facts)) string {
		v := goodFacts()
		f(&v)
		b, _ := json.Marshal(v)
		return string(b)
	}
	big, _ := json.Marshal(tooMany)
	for _, row := range []struct{ name, raw, want string }{
		{"refuse/not-json", `{"version":`, "not fleetd's facts"},
		{"refuse/a-string", `"facts"`, "not fleetd's facts"},
		{"refuse/newer-version", mod(func(f *layout.Facts) { f.Version = 2 }), "version 2, this fleetd reads version 1"},
		{"refuse/no-version", `{"proved":{}}`, "version 0"},
		{"refuse/ek-not-a-hash", mod(func(f *layout.Facts) { f.Proved.EKSHA256 = "zz" }), "proved ek_sha256 is not a hex SHA-256"},
		{"refuse/proved-no-since", mod(func(f *layout.Facts) { f.Proved.Since = time.Time{} }), "proved facts have no since"},
		{"refuse/claimed-unknown-source", mod(func(f *layout.Facts) { f.Claimed.Source = "owner" }), `claimed facts have source "owner"`},
		{"refuse/uuid-not-a-hash", mod(func(f *layout.Facts) { f.Claimed.SMBIOSUUIDSHA256 = "4c4c4544" }), "smbios_uuid_sha256 is not a hex SHA-256"},
		{"refuse/mac-upper-case", mod(func(f *layout.Facts) { f.Claimed.MAC = "52:54:00:12:34:5A" }), "claimed mac"},
		{"refuse/mac-short", mod(func(f *layout.Facts) { f.Claimed.MAC = "52:54:00" }), "claimed mac"},
		{"refuse/too-many-disks", string(big), "at most 64 are kept"},
		{"refuse/more-listed-than-found", mod(func(f *layout.Facts) { f.Claimed.DisksFound = 0 }), "1 listed of 0 found"},
		{"refuse/serial-too-long", mod(func(f *layout.Facts) { f.Claimed.Disks[0].Serial = strings.Repeat("s", 129) }), "129 bytes, more than 128"},
		{"refuse/serial-control", mod(func(f *layout.Facts) { f.Claimed.Disks[0].Serial = "SER\nA" }), "control characters"},
		{"refuse/serial-empty", mod(func(f *layout.Facts) { f.Claimed.Disks[0].Serial = " " }), "a disk has no serial"},
		{"refuse/too-large", `{"version":1,"x":"` + strings.Repeat("x", layout.MaxFactsJSON) + `"}`, "more than 65536"},
	} {
		t.Run(row.name, func(t *testing.T) {
			f, err := layout.DecodeFacts([]byte(row.raw))
			if err == nil || !strings.Contains(err.Error(), row.want) {
				t.Errorf("err = %v, want one containing %q", err, row.want)
			}
			if !f.Empty() {
				t.Errorf("facts = %+v, want none", f)
			}
		})
	}
}

// TestFactsSameValues: the values are compared without their time and source, so a check that
// finds the same machine writes nothing; any value that differs is a change.
func TestFactsSameValues(t *testing.T) {
	a, b := goodFacts(), goodFacts()
	b.Proved.Since, b.Proved.Source = factsSince.Add(time.Hour), layout.FactsFromBootCheck
	b.Claimed.Since = factsSince.Add(time.Hour)
	if !a.Proved.SameValues(b.Proved) || !a.Claimed.SameValues(b.Claimed) {
		t.Error("the same values at another time are not SameValues")
	}
	if a.Equal(b) {
		t.Error("Equal ignores the times")
	}
	for name, change := range map[string]func(*layout.Facts){
		"boot state": func(f *layout.Facts) { f.Proved.BootState = factsHash },
		"disk":       func(f *layout.Facts) { f.Claimed.Disks[0].Serial = "SER-B" },
		"disk count": func(f *layout.Facts) { f.Claimed.DisksFound = 2 },
		"mac":        func(f *layout.Facts) { f.Claimed.MAC = "52:54:00:12:34:57" },
	} {
		c := goodFacts()
		change(&c)
		if a.Proved.SameValues(c.Proved) && a.Claimed.SameValues(c.Claimed) {
			t.Errorf("a changed %s is SameValues", name)
		}
	}
}

// FuzzDecodeFacts: whatever fleet_facts holds, DecodeFacts returns facts that pass Check, or none.
func FuzzDecodeFacts(f *testing.F) {
	raw, _ := json.Marshal(goodFacts())
	f.Add(raw)
	f.Add([]byte(`{"version":1,"claimed":{"disks":[{"serial":""}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := layout.DecodeFacts(raw)
		if err != nil && !got.Empty() {
			t.Fatalf("facts %+v with error %v", got, err)
		}
		if err == nil && !got.Empty() && got.Check() != nil {
			t.Fatalf("accepted facts fail Check: %v", got.Check())
		}
	})
}

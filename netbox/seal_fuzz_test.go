package netbox

import (
	"encoding/json"
	"github.com/folly-infra/fleetd/netbox/layout"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// FuzzSealReadBack: whatever texts, times and identity fleetd writes, the values it reads back
// through this adapter's conversions — the PATCH body it sends (patchBody), as JSON, decoded as
// NetBox hands custom fields back (FieldsOf) — verify under the seal made over what it wrote.
// TestSealSurvivesNetBox makes the same round trip through the emulator.
func FuzzSealReadBack(f *testing.F) {
	f.Add("Delivered.", "5f1c0b", "SYS123", int64(1796000000123456789), 60, true)
	f.Add("  spaces  ", " ", "\xff\xfe", int64(0), 0, false)
	f.Add("\u2028<&>\"\\", "漢字", "\x00", int64(-1), -720, true)
	f.Fuzz(func(t *testing.T, message, serial, smbios string, nanos int64, offsetMinutes int, facts bool) {
		o := fleet.Owned{State: fleet.StateActive, Message: message, LAKSerial: serial, BootCheck: fleet.BootCheckOK}
		if nanos != 0 {
			o.LastBootCheck = time.Unix(0, nanos).In(time.FixedZone("", 60*(offsetMinutes%1440)))
		}
		at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		o.Identity = fleettest.Attested(fleet.Device{Owned: fleet.Owned{Request: "provision-aaaaaaaa"}}, "uuid", at, time.Hour).Owned.Identity
		o.Identity.SMBIOSSerial = smbios
		if facts {
			o.Facts = layout.Facts{Version: layout.FactsVersion, Claimed: layout.ClaimedFacts{MAC: serial, DisksFound: 1,
				Disks:   []layout.FactDisk{{Serial: smbios, Path: "/dev/disk/by-id/x"}},
				Learned: layout.Learned{Since: at, Source: layout.FactsFromBootCheck}}}
		}
		keys := fleettest.SealKeys()
		p := fleet.Patch{State: &o.State, Message: &o.Message, LAKSerial: &o.LAKSerial, LastBootCheck: &o.LastBootCheck,
			BootCheck: &o.BootCheck, Identity: &o.Identity, Facts: &o.Facts, Seal: keys.Seal(12, o, at)}
		cf, _ := patchBody(p)
		raw, err := json.Marshal(cf)
		if err != nil {
			t.Skip("not encodable as a PATCH body") // a time json cannot write; fleetd writes none
		}
		var back map[string]any
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		d, err := FieldsOf(back)
		if err != nil {
			t.Skip("a last_boot_check this adapter does not read") // years beyond RFC 3339
		}
		if c := keys.Verify(12, d.Owned, d.Seal); c.Result != fleet.SealValid {
			t.Fatalf("wrote %+v, read back %+v: the seal is %s", o, d.Owned, c.Result)
		}
	})
}

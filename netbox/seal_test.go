package netbox_test

import (
	"context"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// patchAll is the write of every field fleetd owns with o's values, as fleetd writes a device
// it puts back or marks untrusted.
func patchAll(o fleet.Owned) fleet.Patch {
	return fleet.Patch{State: &o.State, Message: &o.Message, Request: &o.Request, Workflow: &o.Workflow,
		LDevIDSerial: &o.LDevIDSerial, LAKSerial: &o.LAKSerial, LDevIDSerialPrevious: &o.LDevIDSerialPrevious,
		LAKSerialPrevious: &o.LAKSerialPrevious, BootBaseline: &o.BootBaseline, LastBootCheck: &o.LastBootCheck,
		BootCheck: &o.BootCheck, Identity: &o.Identity, Facts: &o.Facts}
}

// roundTrip writes o, sealed as fleetd seals its writes, through the adapter to the emulator,
// reads the device back as fleetd reads it, and reports the seal check of what it read.
func (e *env) roundTrip(t testing.TB, o fleet.Owned) (fleet.SealCheck, fleet.Owned) {
	t.Helper()
	keys := fleettest.SealKeys()
	p := patchAll(o)
	p.Seal = keys.Seal(e.node1, o, time.Now())
	if _, err := e.client.Update(context.Background(), e.node1, p); err != nil {
		t.Fatalf("write %+v: %v", o, err)
	}
	d, err := e.client.Device(context.Background(), e.node1)
	if err != nil {
		t.Fatal(err)
	}
	return keys.Verify(e.node1, d.Owned, d.Seal), d.Owned
}

// TestSealSurvivesNetBox: a seal made over the values fleetd writes verifies once they are written
// through this adapter to NetBox (the emulator: JSON fields stored as values and handed back in
// another key order, as jsonb does) and read back, whatever NetBox and the adapter make of them
// on the way: spaces around a text (trimmed), invalid UTF-8, a boot check time with nanoseconds
// in another zone, no identity or facts (null) after some, facts fleetd cannot read back, and a
// wide range of random values (the property, 200 writes).
func TestSealSurvivesNetBox(t *testing.T) {
	e := newEnv(t, 0)
	at := time.Date(2026, 12, 1, 10, 0, 0, 987654321, time.FixedZone("CET", 3600))
	full := fleet.Owned{State: fleet.StateActive, Message: "Delivered.", Request: "provision-k3f9x2mq", Workflow: "node1-provision-k3f9x2mq",
		LDevIDSerial: "5f1c0a", LAKSerial: "5f1c0b", LDevIDSerialPrevious: "4e", LAKSerialPrevious: "4f",
		BootBaseline: "pcr 4\nsha256 9f86\n", LastBootCheck: at, BootCheck: fleet.BootCheckOK,
		Identity: fleettest.Attested(fleet.Device{Owned: fleet.Owned{Request: "provision-k3f9x2mq"}}, "4c4c4544-0042-3510-8052-b4c04f4e3232", at, time.Hour).Owned.Identity,
		Facts: layout.Facts{Version: layout.FactsVersion, Proved: layout.ProvedFacts{EKSHA256: fleettest.EKHash, Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}},
			Claimed: layout.ClaimedFacts{MAC: "3c:ec:ef:4c:4f:54", DisksFound: 1, Disks: []layout.FactDisk{{Serial: "S1", Path: "/dev/disk/by-id/ata-S1"}},
				Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}}}}
	rows := []struct {
		name string
		edit func(*fleet.Owned)
	}{
		{"ok/every field set", func(*fleet.Owned) {}},
		{"ok/spaces around the texts", func(o *fleet.Owned) { o.Message, o.LAKSerial = " Delivered.  \n", "\t5f1c0b " }},
		{"ok/invalid UTF-8 in a message", func(o *fleet.Owned) { o.Message = "disk \xff serial \xc3" }},
		{"ok/a message of spaces only", func(o *fleet.Owned) { o.Message = "   " }},
		{"ok/no identity and no facts after some", func(o *fleet.Owned) { o.Identity, o.Facts = fleet.IdentityMaterial{}, layout.Facts{} }},
		{"ok/an identity without chains", func(o *fleet.Owned) { o.Identity.LAK, o.Identity.LDevID = fleet.LAKMaterial{}, fleet.LDevIDMaterial{} }},
		{"ok/facts fleetd cannot read back", func(o *fleet.Owned) { o.Facts.Claimed.MAC = "3C:EC:EF:4C:4F:54" }},
		{"ok/no boot check yet", func(o *fleet.Owned) { o.LastBootCheck, o.BootCheck = time.Time{}, fleet.BootCheckNone }},
		{"ok/nothing at all", func(o *fleet.Owned) { *o = fleet.Owned{} }},
	}
	for _, r := range rows {
		o := full
		r.edit(&o)
		if c, read := e.roundTrip(t, o); c.Result != fleet.SealValid {
			t.Errorf("%s: read back %+v: the seal is %s, want valid", r.name, read, c.Result)
		}
	}
	rnd := rand.New(rand.NewSource(7))
	for i := range 200 {
		o := randomOwned(rnd, full)
		if c, read := e.roundTrip(t, o); c.Result != fleet.SealValid {
			t.Fatalf("ok/random value %d: wrote %+v, read back %+v: the seal is %s", i, o, read, c.Result)
		}
	}
}

// randomOwned draws values for every field fleetd owns: texts of any runes (ASCII, other scripts,
// JSON's special characters, spaces at either end, invalid bytes), times with any nanoseconds,
// and the identity and facts present or not.
func randomOwned(rnd *rand.Rand, full fleet.Owned) fleet.Owned {
	text := func() string {
		alphabet := []string{"a", "Z", "0", " ", "\t", "\n", `"`, `\`, "<", "&", "é", "漢", "\U0001F600", "\xff", "\x7f", "'", "\u2028"}
		var b strings.Builder
		for range rnd.Intn(40) {
			b.WriteString(alphabet[rnd.Intn(len(alphabet))])
		}
		return b.String()
	}
	o := fleet.Owned{State: fleet.States[rnd.Intn(len(fleet.States))], Message: text(), Request: text(), Workflow: text(),
		LDevIDSerial: text(), LAKSerial: text(), LDevIDSerialPrevious: text(), LAKSerialPrevious: text(), BootBaseline: text(),
		BootCheck: []fleet.BootCheck{fleet.BootCheckNone, fleet.BootCheckOK, fleet.BootCheckDrift, fleet.BootCheckFailed}[rnd.Intn(4)]}
	if rnd.Intn(4) > 0 {
		o.LastBootCheck = time.Unix(rnd.Int63n(4e9), rnd.Int63n(1e9)).In(time.FixedZone("", 60*(rnd.Intn(1500)-720)))
	}
	if rnd.Intn(2) == 0 {
		o.Identity = full.Identity
		o.Identity.Request, o.Identity.SMBIOSSerial = fmt.Sprintf("provision-%08x", rnd.Uint32()), text()
		o.Identity.LAK.Blob = []byte(text())
	}
	if rnd.Intn(2) == 0 {
		o.Facts = full.Facts
		o.Facts.Claimed.Disks[0].Serial = fmt.Sprintf("S%x", rnd.Uint32())
	}
	return o
}

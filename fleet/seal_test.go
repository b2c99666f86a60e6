package fleet_test

import (
	"github.com/folly-infra/fleetd/netbox/layout"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// sealedOwned is an active device's owned values as fleetd writes them: every field set, the
// identity with certificate-sized chains and the facts of an enrollment.
func sealedOwned() fleet.Owned {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	d := fleettest.Attested(fleet.Device{Owned: fleet.Owned{Request: "provision-k3f9x2mq"}}, "4c4c4544-0042-3510-8052-b4c04f4e3232", at, time.Hour)
	d.Owned.Identity.LAK.Chain = [][]byte{[]byte(strings.Repeat("L", 700)), []byte(strings.Repeat("C", 600))}
	d.Owned.Identity.LDevID.Chain = [][]byte{[]byte(strings.Repeat("D", 700)), []byte(strings.Repeat("C", 600))}
	d.Owned.Identity.LAK.Blob = []byte(strings.Repeat("b", 400))
	return fleet.Owned{State: fleet.StateActive, Message: "Delivered Talos worker config for node-a.", Request: "provision-k3f9x2mq",
		Workflow: "node-a-provision-k3f9x2mq", LDevIDSerial: "5f1c0a", LAKSerial: "5f1c0b", LDevIDSerialPrevious: "4e0b", LAKSerialPrevious: "4e0c",
		BootBaseline: strings.Repeat("pcr 4 sha256 9f86d081 EV_EFI_BOOT_SERVICES_APPLICATION\n", 40), LastBootCheck: at,
		BootCheck: fleet.BootCheckOK, Identity: d.Owned.Identity,
		Facts: layout.Facts{Version: layout.FactsVersion, Proved: layout.ProvedFacts{EKSHA256: fleettest.EKHash, TPMVersion: "2.0",
			Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}},
			Claimed: layout.ClaimedFacts{MAC: "3c:ec:ef:4c:4f:54", Disks: []layout.FactDisk{{Serial: "S4EWNX0R123456", Path: "/dev/disk/by-id/nvme-S4EWNX0R123456"}},
				DisksFound: 1, Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}}}}
}

func TestNewSealKeys(t *testing.T) {
	secret := []byte(strings.Repeat("s", fleet.MinSealSecret))
	for _, r := range []struct {
		name string
		keys []fleet.SealKey
		want string // "" = accepted
	}{
		{"ok/one key", []fleet.SealKey{{ID: "k1", Secret: secret}}, ""},
		{"ok/two keys, the first signs", []fleet.SealKey{{ID: "k2", Secret: secret}, {ID: "k1", Secret: secret}}, ""},
		{"refuse/none", nil, "none given"},
		{"refuse/an id a seal cannot carry", []fleet.SealKey{{ID: "k.1", Secret: secret}}, `seal key id "k.1"`},
		{"refuse/an empty id", []fleet.SealKey{{ID: "", Secret: secret}}, `seal key id ""`},
		{"refuse/a short secret", []fleet.SealKey{{ID: "k1", Secret: secret[1:]}}, "31 bytes, fewer than 32"},
		{"refuse/an id twice", []fleet.SealKey{{ID: "k1", Secret: secret}, {ID: "k1", Secret: secret}}, "listed twice"},
		{"ok/every edge of the id's characters", []fleet.SealKey{{ID: "azAZ09-_", Secret: secret}}, ""},
		{"ok/an id of 32 characters", []fleet.SealKey{{ID: strings.Repeat("k", 32), Secret: secret}}, ""},
		{"refuse/an id of 33 characters", []fleet.SealKey{{ID: strings.Repeat("k", 33), Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with a backquote, next to 'a'", []fleet.SealKey{{ID: "k`1", Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with {, next to 'z'", []fleet.SealKey{{ID: "k{1", Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with @, next to 'A'", []fleet.SealKey{{ID: "k@1", Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with [, next to 'Z'", []fleet.SealKey{{ID: "k[1", Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with /, next to '0'", []fleet.SealKey{{ID: "k/1", Secret: secret}}, "want 1 to 32 letters"},
		{"refuse/an id with :, next to '9'", []fleet.SealKey{{ID: "k:1", Secret: secret}}, "want 1 to 32 letters"},
	} {
		t.Run(r.name, func(t *testing.T) {
			k, err := fleet.NewSealKeys(r.keys...)
			switch {
			case r.want == "" && (err != nil || k.Signing() != r.keys[0].ID):
				t.Errorf("NewSealKeys = %v, %v; want the first key signing", k, err)
			case r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)):
				t.Errorf("NewSealKeys: %v, want %q", err, r.want)
			}
		})
	}
}

// TestSeal: a seal verifies for exactly the device and the values it was made for, under a
// configured key; any other value of any field, another device, another secret under the same
// id, an unknown id, a malformed seal or none is told apart.
func TestSeal(t *testing.T) {
	keys := fleettest.SealKeys()
	o := sealedOwned()
	at := time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC)
	seal := keys.Seal(12, o, at)
	if !strings.HasPrefix(seal, "fs1.test.") || strings.Contains(seal, ":") {
		t.Fatalf("seal %q: want fs1.<key id>.<time>.<mac>, no ':'", seal)
	}
	if c := keys.Verify(12, o, seal); c.Result != fleet.SealValid || c.KeyID != "test" || !c.At.Equal(at) {
		t.Fatalf("ok/its own values: %+v, want valid by key test at %s", c, at)
	}
	// Every field fleetd owns is sealed: a change of any one is a mismatch.
	changes := map[string]func(*fleet.Owned){
		"fleet_state":            func(o *fleet.Owned) { o.State = fleet.StateWiped },
		"fleet_message":          func(o *fleet.Owned) { o.Message += "!" },
		"fleet_request":          func(o *fleet.Owned) { o.Request = "attest-aaaaaaaa" },
		"fleet_workflow":         func(o *fleet.Owned) { o.Workflow += "x" },
		"ldevid_serial":          func(o *fleet.Owned) { o.LDevIDSerial = "" },
		"lak_serial":             func(o *fleet.Owned) { o.LAKSerial = "0bad" },
		"ldevid_serial_previous": func(o *fleet.Owned) { o.LDevIDSerialPrevious = "" },
		"lak_serial_previous":    func(o *fleet.Owned) { o.LAKSerialPrevious = "5f1c0b" },
		"boot_baseline":          func(o *fleet.Owned) { o.BootBaseline = "" },
		"last_boot_check":        func(o *fleet.Owned) { o.LastBootCheck = o.LastBootCheck.Add(time.Nanosecond) },
		"boot_check":             func(o *fleet.Owned) { o.BootCheck = fleet.BootCheckDrift },
		"fleet_identity":         func(o *fleet.Owned) { o.Identity.LAK.Blob = append([]byte(nil), "other"...) },
		"fleet_facts":            func(o *fleet.Owned) { o.Facts.Claimed.DisksFound = 2 },
		"fleet_facts unreadable": func(o *fleet.Owned) { o.Facts, o.FactsUnreadable = layout.Facts{}, "version 2" },
	}
	for name, change := range changes {
		forged := sealedOwned()
		change(&forged)
		if c := keys.Verify(12, forged, seal); c.Result != fleet.SealMismatch {
			t.Errorf("refuse/%s changed under the seal: %+v, want mismatch", name, c)
		}
	}
	otherSecret, _ := fleet.NewSealKeys(fleet.SealKey{ID: "test", Secret: []byte(strings.Repeat("x", 32))})
	other, _ := fleet.NewSealKeys(fleet.SealKey{ID: "k9", Secret: []byte(strings.Repeat("x", 32))})
	for _, r := range []struct {
		name string
		keys *fleet.SealKeys
		id   int64
		seal string
		want fleet.SealResult
	}{
		{"refuse/another device's seal", keys, 13, seal, fleet.SealMismatch},
		{"refuse/another secret under the same id", otherSecret, 12, seal, fleet.SealMismatch},
		{"refuse/a key this fleetd does not have", other, 12, seal, fleet.SealUnknownKey},
		{"refuse/none", keys, 12, "", fleet.SealMissing},
		{"refuse/another version", keys, 12, "fs2" + strings.TrimPrefix(seal, "fs1"), fleet.SealMalformed},
		{"refuse/a time that is no number", keys, 12, strings.Replace(seal, ".17", ".x17", 1), fleet.SealMalformed},
		{"refuse/a MAC cut short", keys, 12, seal[:len(seal)-2], fleet.SealMalformed},
		{"refuse/another time under the same MAC", keys, 12, strings.Replace(seal, ".1796", ".1797", 1), fleet.SealMismatch},
		{"refuse/text", keys, 12, "sealed by fleetd", fleet.SealMalformed},
	} {
		if c := r.keys.Verify(r.id, o, r.seal); c.Result != r.want {
			t.Errorf("%s: %+v, want %s", r.name, c, r.want)
		}
	}
	// A rotation: the new key signs, the old one still verifies what it sealed.
	rotated, _ := fleet.NewSealKeys(fleet.SealKey{ID: "k2", Secret: []byte(strings.Repeat("n", 32))}, fleettest.SealKey())
	if c := rotated.Verify(12, o, seal); c.Result != fleet.SealValid || c.KeyID != "test" {
		t.Errorf("ok/the old key verifies after a rotation: %+v", c)
	}
	if s := rotated.Seal(12, o, at); !strings.HasPrefix(s, "fs1.k2.") {
		t.Errorf("ok/the new key signs: %q", s)
	}
}

// TestSealReadBack: values that NetBox and the adapter hand back differently from how fleetd
// wrote them — a message with spaces around it (trimmed), invalid UTF-8 in a text or in the
// identity (replaced, as JSON encodes it; netbox.TestSealSurvivesNetBox's random values found the
// identity's), the time of a boot check in another zone (the same instant in UTC), no identity
// or facts (null), facts fleetd cannot read back — seal alike: fleetd seals what it writes and
// verifies what it reads. netbox.TestSealSurvivesNetBox writes them through the emulator.
func TestSealReadBack(t *testing.T) {
	keys := fleettest.SealKeys()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	zone := time.FixedZone("CET", 3600)
	for _, r := range []struct {
		name          string
		written, read fleet.Owned
	}{
		{"ok/spaces around a message", fleet.Owned{Message: "  Delivered.\t\n"}, fleet.Owned{Message: "Delivered."}},
		{"ok/invalid UTF-8 in a message", fleet.Owned{Message: "disk \xff\xfe serial"}, fleet.Owned{Message: "disk \uFFFD\uFFFD serial"}},
		{"ok/a boot check time in another zone", fleet.Owned{LastBootCheck: at.Add(123 * time.Nanosecond).In(zone)}, fleet.Owned{LastBootCheck: at.Add(123 * time.Nanosecond)}},
		{"ok/an empty identity is none", fleet.Owned{Identity: fleet.IdentityMaterial{Version: 1}}, fleet.Owned{}},
		{"ok/invalid UTF-8 in the identity", fleet.Owned{Identity: fleet.IdentityMaterial{Request: "provision-a", SMBIOSSerial: "SYS\xff"}},
			fleet.Owned{Identity: fleet.IdentityMaterial{Request: "provision-a", SMBIOSSerial: "SYS\uFFFD"}}},
		{"ok/empty facts are none", fleet.Owned{Facts: layout.Facts{Version: layout.FactsVersion}}, fleet.Owned{}},
		{"ok/facts fleetd cannot read back", fleet.Owned{Facts: layout.Facts{Version: layout.FactsVersion, Claimed: layout.ClaimedFacts{MAC: "3C:EC:EF:4C:4F:54",
			Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}}}}, fleet.Owned{FactsUnreadable: "claimed mac is not lowercase"}},
	} {
		seal := keys.Seal(12, r.written, at)
		if c := keys.Verify(12, r.read, seal); c.Result != fleet.SealValid {
			t.Errorf("%s: %+v, want the value as read back to verify", r.name, c)
		}
	}
}

// BenchmarkSeal is the seal of an active device's owned values (every field set, an identity with
// two certificate chains), made on every write of fleetd's.
func BenchmarkSeal(b *testing.B) {
	keys, o := fleettest.SealKeys(), sealedOwned()
	at := time.Now()
	for b.Loop() {
		_ = keys.Seal(12, o, at)
	}
}

// BenchmarkVerify is the check of that seal, made on every read of a device.
func BenchmarkVerify(b *testing.B) {
	keys, o := fleettest.SealKeys(), sealedOwned()
	seal := keys.Seal(12, o, time.Now())
	for b.Loop() {
		if keys.Verify(12, o, seal).Result != fleet.SealValid {
			b.Fatal("the seal does not verify")
		}
	}
}

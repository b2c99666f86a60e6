package attest_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// bootOf is the verified-boot value of a recorded log's events (the replay is tested elsewhere).
func bootOf(t *testing.T, log []byte) *attest.VerifiedBoot {
	t.Helper()
	el, err := ga.ParseEventLog(log)
	if err != nil {
		t.Fatal(err)
	}
	return &attest.VerifiedBoot{Events: el.Events(ga.HashSHA256)}
}

func policyOf(t testing.TB, f attest.BootPolicyFile) *attest.BootPolicy {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := attest.ParseBootPolicy(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rewritten is a recorded log with the digests of the named events changed in every bank.
func rewritten(t *testing.T, log []byte, events ...eventlogs.Event) []byte {
	t.Helper()
	b, err := eventlogs.ReplaceDigests(log, events...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBootPolicyCheck: a policy learned from a boot allows that boot, for the fleet and for a
// class with its own list; another kernel (the same log with the kernel's digests changed),
// another initrd (PCR 9 alone changed), a boot the class's own list lacks, and a boot with one
// EFI application more are refused as boot_policy, naming the component that differs. What the
// policy leaves out may change: grub's command line (PCR 8) and the firmware (PCR 0).
func TestBootPolicyCheck(t *testing.T) {
	rhel, err := attest.LearnBoot(eventlogs.RHEL8SecureBoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(rhel.EFIApplications) != 3 || len(rhel.LoadedFiles) != 2 {
		t.Fatalf("RHEL 8 boot: %d EFI applications (shim, grub, kernel) and %d PCR 9 files (kernel, initrd), want 3 and 2",
			len(rhel.EFIApplications), len(rhel.LoadedFiles))
	}
	cos, err := attest.LearnBoot(eventlogs.COS85SecureBoot)
	if err != nil {
		t.Fatal(err)
	}
	var f attest.BootPolicyFile
	f.Learn("", "rhel", rhel)
	f.Learn("cos-only", "cos", cos)
	p := policyOf(t, f)
	extra := rhel
	extra.EFIApplications = append(append([]string{}, rhel.EFIApplications...), strings.Repeat("0", 64))
	rows := []struct {
		name  string
		boot  *attest.VerifiedBoot
		class string
		want  string // "" allowed, else a part of the refusal's message
	}{
		{"ok/the learned boot, fleet list", bootOf(t, eventlogs.RHEL8SecureBoot), "talos-worker", ""},
		{"ok/the class's own list", bootOf(t, eventlogs.COS85SecureBoot), "cos-only", ""},
		{"refuse/another kernel", bootOf(t, eventlogs.RHEL8OtherKernel()), "talos-worker", "PCR 4 EFI application 3 has SHA-256"},
		{"refuse/another initrd (PCR 9 alone)", bootOf(t, rewritten(t, eventlogs.RHEL8SecureBoot, eventlogs.Event{PCR: 9, N: 1})), "talos-worker",
			"PCR 9 measurement 2 has SHA-256"},
		{"ok/another kernel command line (grub's, PCR 8)", bootOf(t, rewritten(t, eventlogs.RHEL8SecureBoot, eventlogs.Event{PCR: 8, N: 30})), "talos-worker", ""},
		{"ok/other firmware (PCR 0)", bootOf(t, rewritten(t, eventlogs.RHEL8SecureBoot, eventlogs.Event{PCR: 0, N: 0})), "talos-worker", ""},
		{"refuse/the class's own list replaces the fleet's", bootOf(t, eventlogs.RHEL8SecureBoot), "cos-only", "class cos-only"},
		{"refuse/a boot the fleet never learned", bootOf(t, eventlogs.COS85SecureBoot), "talos-worker", "the fleet's boot policy"},
		{"refuse/one EFI application more", &attest.VerifiedBoot{Events: withApplication(bootOf(t, eventlogs.RHEL8SecureBoot).Events)}, "talos-worker", "PCR 4 EFI application 4"},
	}
	for _, r := range rows {
		err := p.Check(r.boot, r.class)
		if r.want == "" {
			if err != nil {
				t.Errorf("%s: %v", r.name, err)
			}
			continue
		}
		ref, ok := attest.AsRefusal(err)
		if !ok || ref.Check != attest.CheckBootPolicy || !strings.Contains(ref.Msg, r.want) {
			t.Errorf("%s: %v, want a boot_policy refusal with %q", r.name, err, r.want)
		}
	}
	if f.Learn("", "rhel again", rhel) || len(f.Fleet) != 1 {
		t.Errorf("learning the same boot again added it: %d fleet boots", len(f.Fleet))
	}
}

// withApplication appends one more PCR 4 EFI application to a boot's events.
func withApplication(events []ga.Event) []ga.Event {
	out := append([]ga.Event{}, events...)
	return append(out, ga.Event{Index: 4, Type: ga.EventType(0x80000003), Digest: make([]byte, 32)})
}

// TestBootComponentsLeaveOutTheCommandLine: the Linux EFI stub measures the initrd and the
// command line into PCR 9 as tagged events; the initrd is a component, the command line (which
// carries the machine's MAC under Smee) is not.
func TestBootComponentsLeaveOutTheCommandLine(t *testing.T) {
	tagged := func(id uint32, digest byte) ga.Event {
		d := binary.LittleEndian.AppendUint32(nil, id)
		return ga.Event{Index: 9, Type: ga.EventType(6), Data: append(d, 0, 0, 0, 0), Digest: []byte{digest}}
	}
	c := attest.NewBootComponents([]ga.Event{
		{Index: 4, Type: ga.EventType(0x80000003), Digest: []byte{0x01}},
		tagged(0x8F3B22EC, 0x02),                                   // Linux initrd
		tagged(0x8F3B22ED, 0x03),                                   // LOADED_IMAGE::LoadOptions
		{Index: 8, Type: ga.EventType(0x0d), Digest: []byte{0x04}}, // grub's command line
		{Index: 9, Type: ga.EventType(6), Data: binary.LittleEndian.AppendUint32(nil, 0x8F3B22ED), Digest: []byte{0x05}}, // the tag alone, no data
	})
	if strings.Join(c.EFIApplications, ",") != "01" || strings.Join(c.LoadedFiles, ",") != "02" {
		t.Errorf("components %+v, want the application 01 and the initrd 02 only", c)
	}
}

// TestParseBootPolicy: the file is decoded strictly and validated whole.
func TestParseBootPolicy(t *testing.T) {
	h := strings.Repeat("a", 64)
	rows := []struct{ name, file, want string }{
		{"ok/fleet", `{"version":1,"fleet":[{"name":"hook","efi_applications":["` + h + `"],"loaded_files":[]}]}`, ""},
		{"ok/classes only", `{"version":1,"fleet":[],"classes":{"c":[{"name":"","efi_applications":["` + h + `"],"loaded_files":["` + h + `"]}]}}`, ""},
		{"refuse/unknown field", `{"version":1,"fleet":[],"kernels":[]}`, "unknown field"},
		{"refuse/version", `{"version":2,"fleet":[{"efi_applications":["` + h + `"]}]}`, "version 2"},
		{"refuse/no boot at all", `{"version":1,"fleet":[]}`, "fleet allows no boot"},
		{"refuse/an empty class list", `{"version":1,"fleet":[{"efi_applications":["` + h + `"]}],"classes":{"c":[]}}`, "classes.c allows no boot"},
		{"refuse/no EFI application", `{"version":1,"fleet":[{"efi_applications":[]}]}`, "has no efi_applications"},
		{"refuse/uppercase digest", `{"version":1,"fleet":[{"efi_applications":["` + strings.ToUpper(h) + `"]}]}`, "not a lowercase hex SHA-256"},
		{"refuse/short digest", `{"version":1,"fleet":[{"efi_applications":["abcd"]}]}`, "not a lowercase hex SHA-256"},
		{"refuse/trailing data", `{"version":1,"fleet":[{"efi_applications":["` + h + `"]}]} {}`, "data after"},
	}
	for _, r := range rows {
		_, err := attest.ParseBootPolicy([]byte(r.file))
		if r.want == "" && err != nil || r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)) {
			t.Errorf("%s: %v, want %q", r.name, err, r.want)
		}
	}
}

// TestBootPolicyNearest: a refused boot's message names the allowed boot that shares the most
// components with it in place (PCR 4 and PCR 9 together; the first of equals), and what differs
// from it first.
func TestBootPolicyNearest(t *testing.T) {
	h := func(c string) string { return strings.Repeat(c, 64) }
	boot := func(apps, files []string) *attest.VerifiedBoot {
		var ev []ga.Event
		for _, a := range apps {
			ev = append(ev, ga.Event{Index: 4, Type: ga.EventType(0x80000003), Digest: hexBytes(t, a)})
		}
		for _, f := range files {
			ev = append(ev, ga.Event{Index: 9, Type: ga.EventType(0x0d), Digest: hexBytes(t, f)})
		}
		return &attest.VerifiedBoot{Events: ev}
	}
	var f attest.BootPolicyFile
	f.Learn("", "one", attest.BootComponents{EFIApplications: []string{h("a"), h("b"), h("c")}, LoadedFiles: []string{h("1")}})
	f.Learn("", "two", attest.BootComponents{EFIApplications: []string{h("a"), h("b"), h("d")}, LoadedFiles: []string{h("2"), h("3")}})
	f.Learn("", "three", attest.BootComponents{EFIApplications: []string{h("f"), h("d")}, LoadedFiles: []string{}})
	p := policyOf(t, f)
	for _, r := range []struct {
		name string
		boot *attest.VerifiedBoot
		want string
	}{
		{"refuse/nearest by PCR 4 and PCR 9 together", boot([]string{h("a"), h("b"), h("e")}, []string{h("2"), h("3")}),
			`PCR 4 EFI application 3 has SHA-256 eeeeeeeeeeeeeeee…, the allowed boot dddddddddddddddd… (nearest allowed boot "two")`},
		{"refuse/nearest sharing one component, not the first listed", boot([]string{h("e"), h("d")}, nil),
			`PCR 4 EFI application 1 has SHA-256 eeeeeeeeeeeeeeee…, the allowed boot ffffffffffffffff… (nearest allowed boot "three")`},
		{"refuse/equals: the first listed", boot([]string{h("a"), h("b")}, nil),
			`PCR 4 EFI application 3 (cccccccccccccccc…) is missing (nearest allowed boot "one")`},
		{"refuse/PCR 4 the same, PCR 9 one more", boot([]string{h("a"), h("b"), h("c")}, []string{h("1"), h("4")}),
			`PCR 9 measurement 2 (4444444444444444…) is one more than allowed (nearest allowed boot "one")`},
	} {
		ref, ok := attest.AsRefusal(p.Check(r.boot, "any"))
		if !ok || ref.Check != attest.CheckBootPolicy || !strings.HasSuffix(ref.Msg, r.want) {
			t.Errorf("%s: %v, want a boot_policy refusal ending %q", r.name, ref, r.want)
		}
	}
}

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

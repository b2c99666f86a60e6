package attest_test

import (
	"slices"
	"strings"
	"testing"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// measured returns a recorded log's SHA-256 events as a replay would verify them.
func measured(t *testing.T, log []byte) []ga.Event {
	t.Helper()
	el, err := ga.ParseEventLog(log)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(el.Events(ga.HashSHA256), func(e ga.Event) bool { return e.Type == 0x03 })
}

// TestBaselineText checks that the text form NetBox keeps reads back to the same baseline and
// names what a person diagnosing drift needs: image file names and variable names.
func TestBaselineText(t *testing.T) {
	for name, log := range map[string][]byte{
		"rhel8": eventlogs.RHEL8SecureBoot, "ubuntu": eventlogs.Ubuntu2104NoSecureBoot, "cos": eventlogs.COS85SecureBoot,
	} {
		t.Run("ok/"+name, func(t *testing.T) {
			b := attest.NewBaseline(measured(t, log))
			text := b.String()
			back, err := attest.ParseBaseline(text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(b, back); diff != "" {
				t.Errorf("baseline changed through its text form (-want +got):\n%s", diff)
			}
			if len(text) > 12000 {
				t.Errorf("baseline text is %d bytes; it should stay compact", len(text))
			}
			if len(attest.DiffBaseline(b, back)) != 0 {
				t.Error("a baseline differs from itself")
			}
			for _, want := range []string{"EV_EFI_VARIABLE_DRIVER_CONFIG", " SecureBoot", "EV_SEPARATOR", ".efi"} {
				if !strings.Contains(strings.ToLower(text), strings.ToLower(want)) {
					t.Errorf("baseline text lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

// TestDiffBaseline checks the drift explanations (docs/design.md §5).
func TestDiffBaseline(t *testing.T) {
	shim := attest.BaselineEvent{Type: "EV_EFI_BOOT_SERVICES_APPLICATION", Digest: "aa", Desc: "shimx64.efi"}
	grub := attest.BaselineEvent{Type: "EV_EFI_BOOT_SERVICES_APPLICATION", Digest: "bb", Desc: "grubx64.efi"}
	sep := attest.BaselineEvent{Type: "EV_SEPARATOR", Digest: "cc"}
	base := attest.Baseline{PCRs: []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{sep, shim, grub}}}}
	newShim := shim
	newShim.Digest = "dd"
	newSep := sep
	newSep.Digest = "ee"
	kernel := attest.BaselineEvent{Type: "EV_EFI_BOOT_SERVICES_APPLICATION", Digest: "ff", Desc: "vmlinuz"}
	tests := []struct {
		name string
		cur  []attest.BaselinePCR
		want []string
	}{
		{"ok/same", base.PCRs, nil},
		{"drift/shim-changed", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{sep, newShim, grub}}},
			[]string{"PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION digest changed: shimx64.efi"}},
		{"drift/separator-changed", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{newSep, shim, grub}}},
			[]string{"PCR 4: EV_SEPARATOR digest changed"}},
		{"drift/image-added", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{sep, shim, grub, kernel}}},
			[]string{"PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION added: vmlinuz"}},
		{"drift/image-removed", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{sep, shim}}},
			[]string{"PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION removed: grubx64.efi"}},
		{"drift/new-pcr", []attest.BaselinePCR{{Index: 4, Events: base.PCRs[0].Events}, {Index: 9, Events: []attest.BaselineEvent{kernel}}},
			[]string{"PCR 9: EV_EFI_BOOT_SERVICES_APPLICATION added: vmlinuz"}},
		{"drift/an image added before the others: it alone", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{kernel, sep, shim, grub}}},
			[]string{"PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION added: vmlinuz"}},
		{"drift/the first event removed: it alone", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{shim, grub}}},
			[]string{"PCR 4: EV_SEPARATOR removed"}},
		{"drift/an image added between the first two: it alone", []attest.BaselinePCR{{Index: 4, Events: []attest.BaselineEvent{sep, kernel, shim, grub}}},
			[]string{"PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION added: vmlinuz"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := attest.DiffBaseline(base, attest.Baseline{PCRs: tc.cur})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DiffBaseline (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDiffRecordedBoots explains the difference between two recorded boots of the same image
// with a changed dbx: the change shows in PCR 7 and names the variable.
func TestDiffRecordedBoots(t *testing.T) {
	a := attest.NewBaseline(measured(t, eventlogs.Ubuntu2104NoSecureBoot))
	b := attest.NewBaseline(measured(t, eventlogs.Ubuntu2104NoDBX))
	got := attest.DiffBaseline(a, b)
	if len(got) == 0 {
		t.Fatal("two different boots have no difference")
	}
	t.Logf("drift:\n%s", strings.Join(got, "\n"))
	if !slices.ContainsFunc(got, func(s string) bool {
		return strings.HasPrefix(s, "PCR 7: EV_EFI_VARIABLE_DRIVER_CONFIG") && strings.HasSuffix(s, "dbx")
	}) {
		t.Errorf("no sentence names the changed dbx in PCR 7:\n%s", strings.Join(got, "\n"))
	}
}

// TestParseBaselineRefusals checks that a damaged boot_baseline is refused, not misread, naming
// the line (the header is line 1).
func TestParseBaselineRefusals(t *testing.T) {
	for _, r := range []struct{ name, text, want string }{
		{"refuse/no-header", "4 EV_SEPARATOR aa", "does not start with fleetd-baseline/1"},
		{"refuse/short-line", "fleetd-baseline/1\n4 EV_SEPARATOR", "line 2 has 2 fields, want at least 3"},
		{"refuse/pcr-out-range", "fleetd-baseline/1\n0 EV_SEPARATOR aa\n24 EV_SEPARATOR aa", `line 3: PCR "24" is not 0-23`},
		{"refuse/negative-pcr", "fleetd-baseline/1\n-1 EV_SEPARATOR aa", `line 2: PCR "-1" is not 0-23`},
		{"refuse/pcr-order", "fleetd-baseline/1\n7 EV_SEPARATOR aa\n4 EV_SEPARATOR bb", "line 3: PCR 4 after PCR 7"},
	} {
		t.Run(r.name, func(t *testing.T) {
			if _, err := attest.ParseBaseline(r.text); err == nil || !strings.Contains(err.Error(), r.want) {
				t.Errorf("ParseBaseline(%q): %v, want an error with %q", r.text, err, r.want)
			}
		})
	}
	// The first and last PCRs, and PCR 0 after itself, are read.
	b, err := attest.ParseBaseline("fleetd-baseline/1\n0 EV_SEPARATOR aa\n0 EV_SEPARATOR bb first\n23 EV_SEPARATOR cc")
	if err != nil || len(b.PCRs) != 2 || len(b.PCRs[0].Events) != 2 || b.PCRs[0].Events[1].Desc != "first" || b.PCRs[1].Index != 23 {
		t.Errorf("ParseBaseline of PCRs 0, 0 and 23: %+v, %v", b, err)
	}
}

// TestBaselineDigests: a baseline keeps the first 16 bytes of each event's digest (enough to tell
// boots apart, short enough for NetBox), whatever the bank's size, and a shorter digest whole.
func TestBaselineDigests(t *testing.T) {
	digest := func(n int) []byte {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(i)
		}
		return d
	}
	b := attest.NewBaseline([]ga.Event{
		{Index: 4, Type: 0x80000003, Digest: digest(32)},
		{Index: 4, Type: 0x80000003, Digest: digest(48)},
		{Index: 7, Type: 0x80000001, Digest: digest(16)},
		{Index: 0, Type: 0x04, Digest: digest(8)},
	})
	want := "fleetd-baseline/1\n0 EV_SEPARATOR 0001020304050607" +
		"\n4 EV_EFI_BOOT_SERVICES_APPLICATION 000102030405060708090a0b0c0d0e0f" +
		"\n4 EV_EFI_BOOT_SERVICES_APPLICATION 000102030405060708090a0b0c0d0e0f" +
		"\n7 EV_EFI_VARIABLE_DRIVER_CONFIG 000102030405060708090a0b0c0d0e0f"
	if got := b.String(); got != want {
		t.Errorf("baseline:\n%s\nwant:\n%s", got, want)
	}
}

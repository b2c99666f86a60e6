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

// TestParseBaselineRefusals checks that a damaged boot_baseline is refused, not misread.
func TestParseBaselineRefusals(t *testing.T) {
	for name, text := range map[string]string{
		"refuse/no-header":     "4 EV_SEPARATOR aa",
		"refuse/short-line":    "fleetd-baseline/1\n4 EV_SEPARATOR",
		"refuse/pcr-out-range": "fleetd-baseline/1\n24 EV_SEPARATOR aa",
		"refuse/pcr-order":     "fleetd-baseline/1\n7 EV_SEPARATOR aa\n4 EV_SEPARATOR bb",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := attest.ParseBaseline(text); err == nil {
				t.Errorf("ParseBaseline(%q) succeeded", text)
			}
		})
	}
}

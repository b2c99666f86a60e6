package attest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-attestation/attest"
)

// The boot policy (docs/security.md, "What booted in HookOS") is an allow-list of the HookOS
// boots an enrollment may come from. The event log's replay proves only that the log is what the
// TPM measured; a host that wins the DHCP race can boot its own image on the real machine and
// pass that with the real TPM. The policy names what must have booted: the boot components'
// SHA-256 digests, in measurement order, from the *verified* events (VerifiedBoot.Events), as
// Keylime's measured-boot reference state names the shim, grub and kernel of each allowed boot
// (keylime/policy/create_mb_policy.py). A boot's components are:
//
//   - the EFI applications the firmware loaded and measured into PCR 4
//     (EV_EFI_BOOT_SERVICES_APPLICATION, the PE image's Authenticode digest: iPXE and the HookOS
//     kernel's EFI stub; shim, grub and the kernel on a disk boot), and
//   - what the loader or the kernel measured into PCR 9: the kernel and initrd grub read, or the
//     initrd the Linux EFI stub loaded (EV_EVENT_TAG "Linux initrd", Linux ≥ 5.17).
//
// The kernel command line is left out (grub measures it into PCR 8, the EFI stub into PCR 9 as
// the tagged event LOADED_IMAGE::LoadOptions): Smee writes the machine's MAC into HookOS's, so it
// differs on every machine. Firmware (PCR 0–3) and Secure Boot variables (PCR 7, the class's
// secure_boot) are not the policy's either: they differ by machine model, not by what a DHCP
// winner can choose.

// BootComponents are a verified boot's components, in measurement order, as lowercase hex SHA-256.
type BootComponents struct {
	EFIApplications []string `json:"efi_applications"`
	LoadedFiles     []string `json:"loaded_files"`
}

// AllowedBoot is one boot the policy allows.
type AllowedBoot struct {
	Name string `json:"name"` // a label for people ("HookOS v0.11.0 x86_64"), not checked
	BootComponents
}

// BootPolicyFile is the policy file's JSON (docs/operate.md, attestation.boot_policy_file).
type BootPolicyFile struct {
	Version int                      `json:"version"`
	Fleet   []AllowedBoot            `json:"fleet"`             // the boots every class allows
	Classes map[string][]AllowedBoot `json:"classes,omitempty"` // a class's own list replaces the fleet's
}

// BootPolicyVersion is the file format's version.
const BootPolicyVersion = 1

// Kernel-stub tagged events (Linux drivers/firmware/efi/libstub/efistub.h).
const (
	eventTag              = attest.EventType(0x00000006) // EV_EVENT_TAG
	eventBootApplication  = attest.EventType(0x80000003) // EV_EFI_BOOT_SERVICES_APPLICATION
	loadOptionsEventTagID = 0x8F3B22ED                   // LOADED_IMAGE::LoadOptions: the command line
)

// NewBootComponents picks a boot's components out of its events (see above).
func NewBootComponents(events []attest.Event) BootComponents {
	c := BootComponents{EFIApplications: []string{}, LoadedFiles: []string{}}
	for _, e := range events {
		switch {
		case e.Index == 4 && e.Type == eventBootApplication:
			c.EFIApplications = append(c.EFIApplications, hex.EncodeToString(e.Digest))
		case e.Index == 9 && !isCommandLine(e):
			c.LoadedFiles = append(c.LoadedFiles, hex.EncodeToString(e.Digest))
		}
	}
	return c
}

// isCommandLine reports whether a PCR 9 event is the EFI stub's measurement of the command line
// (a TCG_PCClientTaggedEvent whose taggedEventID is LOAD_OPTIONS_EVENT_TAG_ID).
func isCommandLine(e attest.Event) bool {
	return e.Type == eventTag && len(e.Data) >= 4 && binary.LittleEndian.Uint32(e.Data) == loadOptionsEventTagID
}

// Equal reports whether two boots have the same components in the same order.
func (c BootComponents) Equal(o BootComponents) bool {
	return slices.Equal(c.EFIApplications, o.EFIApplications) && slices.Equal(c.LoadedFiles, o.LoadedFiles)
}

// BootPolicy is a validated policy.
type BootPolicy struct {
	file BootPolicyFile
}

// ParseBootPolicy decodes a policy file strictly (unknown fields refused) and validates it whole:
// version 1; every allowed boot has at least one EFI application, and every digest is 64
// lowercase hex digits; the fleet's list or, for each class named, the class's own is not empty.
// Which class names exist is the caller's to check (BootPolicy.Classes against classes.json).
func ParseBootPolicy(b []byte) (*BootPolicy, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f BootPolicyFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse boot policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("parse boot policy: data after the JSON object")
	}
	if f.Version != BootPolicyVersion {
		return nil, fmt.Errorf("parse boot policy: version %d, want %d", f.Version, BootPolicyVersion)
	}
	var problems []string
	problems = append(problems, bootsProblems("fleet", f.Fleet, len(f.Classes) == 0)...)
	for _, name := range slices.Sorted(maps.Keys(f.Classes)) {
		problems = append(problems, bootsProblems("classes."+name, f.Classes[name], true)...)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("parse boot policy: %s", strings.Join(problems, "; "))
	}
	return &BootPolicy{file: f}, nil
}

// bootsProblems lists what is wrong with one list of allowed boots.
func bootsProblems(where string, boots []AllowedBoot, required bool) []string {
	var p []string
	if required && len(boots) == 0 {
		p = append(p, where+" allows no boot: learn one with fleetd policy learn")
	}
	for i, b := range boots {
		at := fmt.Sprintf("%s[%d]", where, i)
		if len(b.EFIApplications) == 0 {
			p = append(p, at+" has no efi_applications: a UEFI netboot measures at least the loader")
		}
		for _, d := range append(slices.Clone(b.EFIApplications), b.LoadedFiles...) {
			if len(d) != 64 || strings.Trim(d, "0123456789abcdef") != "" {
				p = append(p, fmt.Sprintf("%s: %.70q is not a lowercase hex SHA-256 (64 digits)", at, d))
			}
		}
	}
	return p
}

// File returns the policy as its file holds it.
func (p *BootPolicy) File() BootPolicyFile { return p.file }

// Classes are the classes that have their own list, sorted.
func (p *BootPolicy) Classes() []string {
	return slices.Sorted(maps.Keys(p.file.Classes))
}

// Boots is how many boots a class allows (its own list's, or the fleet's).
func (p *BootPolicy) Boots(class string) int {
	boots, _ := p.allowed(class)
	return len(boots)
}

// allowed is the list of boots a class allows: its own, or the fleet's.
func (p *BootPolicy) allowed(class string) ([]AllowedBoot, string) {
	if own, ok := p.file.Classes[class]; ok {
		return own, "class " + class
	}
	return p.file.Fleet, "the fleet"
}

// Check refuses a verified boot whose components are not exactly those of one boot the class
// allows. The refusal names, for fleetd's log, the first component that differs from the nearest
// allowed boot.
func (p *BootPolicy) Check(vb *VerifiedBoot, class string) error {
	_, err := p.Match(vb, class)
	return err
}

// Match is Check that also names the allowed boot the verified boot is.
func (p *BootPolicy) Match(vb *VerifiedBoot, class string) (string, error) {
	got := NewBootComponents(vb.Events)
	boots, whose := p.allowed(class)
	for _, b := range boots {
		if b.BootComponents.Equal(got) {
			return b.Name, nil
		}
	}
	return "", refuse(CheckBootPolicy, "the verified boot is none of the %d boots %s's boot policy allows: %s",
		len(boots), whose, nearestDifference(got, boots))
}

// nearestDifference describes how a boot differs from the allowed boot that shares the most of
// its components in place.
func nearestDifference(got BootComponents, boots []AllowedBoot) string {
	if len(boots) == 0 {
		return "it allows none"
	}
	best, bestScore := boots[0], -1
	for _, b := range boots {
		if s := samePlaces(got.EFIApplications, b.EFIApplications) + samePlaces(got.LoadedFiles, b.LoadedFiles); s > bestScore {
			best, bestScore = b, s
		}
	}
	if d := firstDifference("PCR 4 EFI application", got.EFIApplications, best.EFIApplications); d != "" {
		return d + " (nearest allowed boot " + fmt.Sprintf("%q", best.Name) + ")"
	}
	return firstDifference("PCR 9 measurement", got.LoadedFiles, best.LoadedFiles) + " (nearest allowed boot " + fmt.Sprintf("%q", best.Name) + ")"
}

func samePlaces(a, b []string) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

func firstDifference(what string, got, want []string) string {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Sprintf("%s %d (%.16s…) is missing", what, i+1, want[i])
		case i >= len(want):
			return fmt.Sprintf("%s %d (%.16s…) is one more than allowed", what, i+1, got[i])
		case got[i] != want[i]:
			return fmt.Sprintf("%s %d has SHA-256 %.16s…, the allowed boot %.16s…", what, i+1, got[i], want[i])
		}
	}
	return ""
}

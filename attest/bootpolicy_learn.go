package attest

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"
)

// LearnBoot reads the boot components of a known-good netboot from its event log (the
// evidence's event_log, /sys/kernel/security/tpm0/binary_bios_measurements in HookOS). The log
// is trusted as the operator's: it is not replayed against a quote here, which is why only a boot
// the operator knows to be theirs may be learned (docs/security.md, "What booted in HookOS").
func LearnBoot(eventLog []byte) (BootComponents, error) {
	el, err := attest.ParseEventLog(eventLog)
	if err != nil {
		return BootComponents{}, fmt.Errorf("learn boot: the event log does not parse: %w", err)
	}
	if !slices.Contains(el.Algs, attest.HashSHA256) {
		return BootComponents{}, errors.New("learn boot: the event log has no SHA-256 digests")
	}
	c := NewBootComponents(el.Events(attest.HashSHA256))
	if len(c.EFIApplications) == 0 {
		return BootComponents{}, errors.New("learn boot: the event log measures no EFI application into PCR 4: it is not a UEFI boot")
	}
	return c, nil
}

// Learn adds a boot to the fleet's list (class "") or to a class's own list, unless the list
// already allows it; it reports whether it added it. A class without its own list starts one
// (which then replaces the fleet's for that class).
func (f *BootPolicyFile) Learn(class, name string, c BootComponents) bool {
	if f.Version == 0 {
		f.Version = BootPolicyVersion
	}
	list := &f.Fleet
	if class != "" {
		if f.Classes == nil {
			f.Classes = map[string][]AllowedBoot{}
		}
		l := f.Classes[class]
		list = &l
		defer func() { f.Classes[class] = l }()
	}
	for _, b := range *list {
		if b.BootComponents.Equal(c) {
			return false
		}
	}
	*list = append(*list, AllowedBoot{Name: name, BootComponents: c})
	return true
}

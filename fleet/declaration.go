package fleet

import (
	"fmt"
	"regexp"
	"strings"
)

// dnsLabel is what a device name must look like to name Kubernetes objects and hostnames.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Problems lists, one sentence each, what in the device's declaration prevents fleetd from
// carrying out action on it (docs/design.md §1 step 2). An empty list means the request can be accepted.
// Every problem is listed, not only the first, so the owner can fix them in one pass.
func (d Device) Problems(action Action, cat Catalog) []string {
	var p []string
	if !dnsLabel.MatchString(d.Name) {
		p = append(p, fmt.Sprintf("device name %q cannot name a host or a Kubernetes object: use lowercase letters, digits and '-'", d.Name))
	}
	p = append(p, d.classProblems(cat)...)
	if d.Declared.TPM == TPM12 {
		p = append(p, "tpm is 1.2: fleetd attests only TPM 2.0 machines, so this machine cannot use this path")
	} else if d.Declared.TPM != "" && d.Declared.TPM != TPM20 {
		p = append(p, fmt.Sprintf("tpm %q is not 2.0 or 1.2", d.Declared.TPM))
	}
	if d.Declared.EKCert != "" && d.Declared.EKCert != EKCertPresent && d.Declared.EKCert != EKCertNone {
		p = append(p, fmt.Sprintf("ek_certificate %q is not present or none", d.Declared.EKCert))
	}
	if strings.TrimSpace(d.Declared.DiskSerial) == "" {
		p = append(p, "disk_serial is empty: declare the serial of the one disk that may be wiped and installed")
	}
	if d.PrimaryMAC() == "" {
		p = append(p, "the device has no MAC address: add one to its interface so Tinkerbell can recognise the machine")
	}
	if !d.Address.IsValid() || !d.Address.Addr().Is4() {
		p = append(p, "the device has no primary IPv4 address: assign one so DHCP and configuration delivery know the machine")
	}
	switch {
	case len(d.Declared.EKHashes) == 0:
		p = append(p, "ek_sha256 is empty: approve the machine's EK by adding the SHA-256 of its public key")
	default:
		for _, h := range d.Declared.EKHashes {
			if !IsEKHash(h) {
				p = append(p, fmt.Sprintf("ek_sha256 entry %q is not a hex SHA-256 (64 hex digits)", h))
				break
			}
		}
	}
	p = append(p, d.statusProblems(action)...)
	return p
}

func (d Device) classProblems(cat Catalog) []string {
	if d.Declared.Class == "" {
		return []string{"fleet_class is empty: set it to a class in classes.json"}
	}
	c, ok := cat.Class(d.Declared.Class)
	if !ok {
		return []string{fmt.Sprintf("fleet_class %q is not in classes.json (known: %s)", d.Declared.Class, strings.Join(cat.Names(), ", "))}
	}
	if !c.Installable {
		return []string{fmt.Sprintf("class %s cannot be installed: %s", c.Name, c.Reason)}
	}
	return nil
}

func (d Device) statusProblems(action Action) []string {
	switch action {
	case ActionAttest:
		if d.Status != StatusActive {
			return []string{fmt.Sprintf("attest re-proves a running node, but the device status is %s: provision it instead", d.Status)}
		}
	case ActionProvision:
		if d.Status == StatusDecommissioning {
			return []string{"the device is decommissioning: set its status back to planned before provisioning it"}
		}
	}
	return nil
}

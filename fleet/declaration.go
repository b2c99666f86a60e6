package fleet

import (
	"fmt"
	"regexp"
	"strings"
)

// dnsLabel is what a device name must look like to name Kubernetes objects and hostnames.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// IsDNSLabel reports whether s is what a device name must be (a lowercase RFC 1123 label) to
// name Kubernetes objects and hostnames; the renderer holds the fleet's endpoint names to it too.
func IsDNSLabel(s string) bool { return dnsLabel.MatchString(s) }

// DeclarationCheck is one check of a device's declaration against a request (docs/design.md §1
// step 2): Passed says what the declaration holds when it passes, Problem, one sentence, why it
// cannot carry the request when it fails. The claim refuses a request when any check fails;
// `fleetd plan` shows every check, passed or failed (plan.go).
type DeclarationCheck struct {
	Name    string // action, name, class, tpm, ek_certificate, disk_serial, mac, address, ek_sha256, status
	Passed  string
	Problem string
}

// Problems lists, one sentence each, what in the device's declaration prevents fleetd from
// carrying out action on it (docs/design.md §1 step 2). An empty list means the request can be accepted.
// Every problem is listed, not only the first, so the owner can fix them in one pass.
func (d Device) Problems(action Action, cat Catalog) []string {
	return problemsOf(d.Checks(action, cat))
}

// problemsOf is the sentences of the failed checks, in order.
func problemsOf(checks []DeclarationCheck) []string {
	var p []string
	for _, c := range checks {
		if c.Problem != "" {
			p = append(p, c.Problem)
		}
	}
	return p
}

// Checks is every check of the declaration for action, in the order Problems lists them.
func (d Device) Checks(action Action, cat Catalog) []DeclarationCheck {
	name := DeclarationCheck{Name: "name", Passed: fmt.Sprintf("%s can name a host and Kubernetes objects", d.Name)}
	if !dnsLabel.MatchString(d.Name) {
		name.Problem = fmt.Sprintf("device name %q cannot name a host or a Kubernetes object: use lowercase letters, digits and '-'", d.Name)
	}
	checks := []DeclarationCheck{name, d.classCheck(cat), d.tpmCheck(), d.ekCertCheck()}
	disk := DeclarationCheck{Name: "disk_serial", Passed: fmt.Sprintf("disk_serial %s is declared", strings.TrimSpace(d.Declared.DiskSerial))}
	if strings.TrimSpace(d.Declared.DiskSerial) == "" {
		disk.Problem = "disk_serial is empty: declare the serial of the one disk that may be wiped and installed"
	}
	mac := DeclarationCheck{Name: "mac", Passed: fmt.Sprintf("MAC %s identifies the machine to Tinkerbell", d.PrimaryMAC())}
	if d.PrimaryMAC() == "" {
		mac.Problem = "the device has no MAC address: add one to its interface so Tinkerbell can recognise the machine"
	}
	addr := DeclarationCheck{Name: "address", Passed: fmt.Sprintf("primary IPv4 %s", d.Address)}
	if !d.Address.IsValid() || !d.Address.Addr().Is4() {
		addr.Problem = "the device has no primary IPv4 address: assign one so DHCP and configuration delivery know the machine"
	}
	checks = append(checks, disk, mac, addr, d.ekHashCheck())
	return append(checks, d.statusCheck(action))
}

func (d Device) classCheck(cat Catalog) DeclarationCheck {
	c := DeclarationCheck{Name: "class"}
	if d.Declared.Class == "" {
		c.Problem = "fleet_class is empty: set it to a class in classes.json"
		return c
	}
	cl, ok := cat.Class(d.Declared.Class)
	switch {
	case !ok:
		c.Problem = fmt.Sprintf("fleet_class %q is not in classes.json (known: %s)", d.Declared.Class, strings.Join(cat.Names(), ", "))
	case !cl.Installable:
		c.Problem = fmt.Sprintf("class %s cannot be installed: %s", cl.Name, cl.Reason)
	default:
		c.Passed = fmt.Sprintf("class %s (%s) is in classes.json and installable", cl.Name, cl.Kind)
	}
	return c
}

func (d Device) tpmCheck() DeclarationCheck {
	c := DeclarationCheck{Name: "tpm", Passed: "tpm 2.0"}
	if d.Declared.TPM == "" {
		c.Passed = "tpm empty, which means 2.0"
	}
	if d.Declared.TPM == TPM12 {
		c.Problem = "tpm is 1.2: fleetd attests only TPM 2.0 machines, so this machine cannot use this path"
	} else if d.Declared.TPM != "" && d.Declared.TPM != TPM20 {
		c.Problem = fmt.Sprintf("tpm %q is not 2.0 or 1.2", d.Declared.TPM)
	}
	return c
}

func (d Device) ekCertCheck() DeclarationCheck {
	c := DeclarationCheck{Name: "ek_certificate", Passed: "ek_certificate " + string(d.Declared.EKCert)}
	if d.Declared.EKCert == "" {
		c.Passed = "ek_certificate empty, which means present"
	}
	if d.Declared.EKCert != "" && d.Declared.EKCert != EKCertPresent && d.Declared.EKCert != EKCertNone {
		c.Problem = fmt.Sprintf("ek_certificate %q is not present or none", d.Declared.EKCert)
	}
	return c
}

func (d Device) ekHashCheck() DeclarationCheck {
	c := DeclarationCheck{Name: "ek_sha256", Passed: fmt.Sprintf("%d approved EK hash(es)", len(d.Declared.EKHashes))}
	if len(d.Declared.EKHashes) == 0 {
		c.Problem = "ek_sha256 is empty: approve the machine's EK by adding the SHA-256 of its public key"
		return c
	}
	for _, h := range d.Declared.EKHashes {
		if !IsEKHash(h) {
			c.Problem = fmt.Sprintf("ek_sha256 entry %q is not a hex SHA-256 (64 hex digits)", h)
			break
		}
	}
	return c
}

func (d Device) statusCheck(action Action) DeclarationCheck {
	c := DeclarationCheck{Name: "status", Passed: fmt.Sprintf("status %s allows %s", d.Status, action)}
	switch action {
	case ActionAttest:
		if d.Status != StatusActive {
			c.Problem = fmt.Sprintf("attest re-proves a running node, but the device status is %s: provision it instead", d.Status)
		}
	case ActionProvision:
		if d.Status == StatusDecommissioning {
			c.Problem = "the device is decommissioning: set its status back to planned before provisioning it"
		}
	}
	return c
}

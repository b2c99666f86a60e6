// Package eventlogs holds TCG measured-boot event logs recorded on real machines, the fixtures
// of attestation's tests and of the tests and development stack that run it: replaying one into
// a software TPM's PCRs (dev/swtpm ReplayEventLog) gives a simulated machine a boot that
// verifies like a real one, and replaying another one models a changed boot. Their origin is
// recorded in README.md. Test fixtures: bin/fleetd does not link this package (TestPackageMap).
package eventlogs

import _ "embed" // the logs are embedded so the development stack's binary carries them

// Recorded event logs (crypto-agile, SHA-1 + SHA-256 + SHA-384 digests, no startup locality).
var (
	// RHEL8SecureBoot is RHEL 8 on a UEFI VM with Secure Boot enabled (82 events).
	//go:embed rhel8-uefi.bin
	RHEL8SecureBoot []byte
	// COS85SecureBoot is Container-Optimized OS 85 on an AMD SEV VM, Secure Boot enabled.
	//go:embed cos-85-amd-sev.bin
	COS85SecureBoot []byte
	// Ubuntu2104NoSecureBoot is Ubuntu 21.04 on a shielded VM with Secure Boot disabled.
	//go:embed ubuntu-2104-no-secure-boot.bin
	Ubuntu2104NoSecureBoot []byte
	// Ubuntu2104NoDBX is Ubuntu 21.04 on a shielded VM with an empty dbx, Secure Boot disabled;
	// it differs from Ubuntu2104NoSecureBoot in a few events, which makes it a changed boot.
	//go:embed ubuntu-2104-no-dbx.bin
	Ubuntu2104NoDBX []byte
)

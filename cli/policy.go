package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/folly-infra/fleetd/attest"
)

// The boot policy (docs/security.md, "What booted in HookOS") lives in its own file, named by
// attestation.boot_policy_file: it is written by `fleetd policy learn` from a known-good netboot,
// not by hand, and it changes with every HookOS release, so it is kept apart from fleetd.yaml
// (settings) and classes.json (the owner's catalogue). Its per-class lists name classes of
// classes.json.

const policyUsage = `usage: fleetd policy learn --policy FILE --event-log FILE [--class NAME] [--name LABEL]

Adds the boot of a known-good HookOS netboot to the boot policy: the SHA-256 digests of the EFI
applications its firmware loaded (PCR 4) and of what its loader or kernel measured (PCR 9), read
from the netboot's event log (/sys/kernel/security/tpm0/binary_bios_measurements in HookOS). The
boot goes to the fleet's list, or with --class to that class's own list, which then replaces the
fleet's for the class. The file is created when it does not exist. Learn only a boot you know is
yours: the log is taken as it is.`

// Policy runs `fleetd policy learn`.
func Policy(args []string, stdout, stderr io.Writer) int {
	args, code, ok := Subcommand("policy", "learn", policyUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	fs := NewFlagSet("policy learn", policyUsage)
	path := fs.String("policy", "", "the boot policy file (attestation.boot_policy_file)")
	eventLog := fs.String("event-log", "", "the known-good netboot's event log")
	class := fs.String("class", "", "the class whose own list the boot joins (default: the fleet's)")
	name := fs.String("name", "", "a label for the boot, e.g. the HookOS release")
	pos, code, ok := Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := NoArgs(fs, pos, stderr); !ok {
		return code
	}
	if *path == "" || *eventLog == "" {
		return Misuse(fs, stderr, "--policy and --event-log are required")
	}
	added, c, err := learnInto(*path, *eventLog, *class, *name)
	if err != nil {
		fmt.Fprintf(stderr, "fleetd policy learn: %v\n", err)
		return 1
	}
	where := "the fleet's list"
	if *class != "" {
		where = "class " + *class + "'s list"
	}
	verb := "added to"
	if !added {
		verb = "already in"
	}
	fmt.Fprintf(stdout, "fleetd policy learn: a boot of %d EFI applications and %d PCR 9 measurements, %s %s in %s\n",
		len(c.EFIApplications), len(c.LoadedFiles), verb, where, *path)
	return 0
}

// learnInto reads the event log and the policy (an absent file is an empty policy), adds the
// boot, validates the result and writes it atomically.
func learnInto(path, eventLog, class, name string) (bool, attest.BootComponents, error) {
	log, err := os.ReadFile(eventLog)
	if err != nil {
		return false, attest.BootComponents{}, err
	}
	c, err := attest.LearnBoot(log)
	if err != nil {
		return false, c, err
	}
	var f attest.BootPolicyFile
	switch b, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, c, err
	default:
		p, err := attest.ParseBootPolicy(b)
		if err != nil {
			return false, c, fmt.Errorf("%s: %w", path, err)
		}
		f = p.File()
	}
	added := f.Learn(class, name, c)
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return false, c, err
	}
	if _, err := attest.ParseBootPolicy(out); err != nil {
		return false, c, fmt.Errorf("the learned policy does not validate: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".boot-policy-*")
	if err != nil {
		return false, c, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(out, '\n')); err != nil {
		tmp.Close()
		return false, c, err
	}
	if err := tmp.Close(); err != nil {
		return false, c, err
	}
	// The policy is public (digests of boot components) and fleetd serve's user, not this
	// command's, reads it.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // G302: see above
		return false, c, err
	}
	return added, c, os.Rename(tmp.Name(), path)
}

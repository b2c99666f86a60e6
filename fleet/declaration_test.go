package fleet_test

import (
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestDeclarationTPMChecks: the sentences the declaration checks give an owner for the TPM
// fields (docs/netbox.md): tpm empty means 2.0, 1.2 and anything else are problems;
// ek_certificate empty means present, present and none are accepted, anything else is a problem.
func TestDeclarationTPMChecks(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tpm         fleet.TPMVersion
		ekCert      fleet.EKCert
		check       string // the check's name
		wantPassed  string // when wantProblem is empty
		wantProblem string
	}{
		{"ok/tpm 2.0", "2.0", "", "tpm", "tpm 2.0", ""},
		{"ok/tpm empty means 2.0", "", "", "tpm", "tpm empty, which means 2.0", ""},
		{"refuse/tpm 1.2", "1.2", "", "tpm", "", "tpm is 1.2: fleetd attests only TPM 2.0 machines, so this machine cannot use this path"},
		{"refuse/tpm 3.0", "3.0", "", "tpm", "", `tpm "3.0" is not 2.0 or 1.2`},
		{"ok/ek_certificate present", "", "present", "ek_certificate", "ek_certificate present", ""},
		{"ok/ek_certificate none", "", "none", "ek_certificate", "ek_certificate none", ""},
		{"ok/ek_certificate empty means present", "", "", "ek_certificate", "ek_certificate empty, which means present", ""},
		{"refuse/ek_certificate maybe", "", "maybe", "ek_certificate", "", `ek_certificate "maybe" is not present or none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fleettest.Declared(1, "node-a")
			d.Declared.TPM, d.Declared.EKCert = tc.tpm, tc.ekCert
			var got *fleet.DeclarationCheck
			for _, c := range d.Checks(fleet.ActionProvision, fleettest.Catalog()) {
				if c.Name == tc.check {
					got = &c
				}
			}
			switch {
			case got == nil:
				t.Fatalf("no %s check", tc.check)
			case got.Problem != tc.wantProblem:
				t.Errorf("problem %q, want %q", got.Problem, tc.wantProblem)
			case tc.wantProblem == "" && got.Passed != tc.wantPassed:
				t.Errorf("passed %q, want %q", got.Passed, tc.wantPassed)
			}
		})
	}
}

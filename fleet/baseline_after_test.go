package fleet

import "testing"

// TestBaselineAfter: the first boot check's journal entry names what reset the baseline, an
// attest as an attestation, not as an installation.
func TestBaselineAfter(t *testing.T) {
	for req, want := range map[string]string{
		"attest-k3f9x2mq":    "attestation (attest-k3f9x2mq)",
		"provision-k3f9x2mq": "installation",
		"":                   "installation",
	} {
		if got := baselineAfter(Device{Owned: Owned{Request: req}}); got != want {
			t.Errorf("request %q: %q, want %q", req, got, want)
		}
	}
}

package chaos

import "testing"

// TestAllowedMove: the checker's restatement of the lifecycle (docs/design.md §1, §2), as a table.
func TestAllowedMove(t *testing.T) {
	rows := []struct {
		name, from, to, action string
		ok                     bool
	}{
		{"ok/provision attested", "pending", "installing", "provision", true},
		{"ok/attest attested", "pending", "active", "attest", true},
		{"ok/wipe attested", "pending", "wiping", "wipe", true},
		{"ok/retirement attested", "pending", "wiping", "retire", true},
		{"ok/refused or Workflow failed", "pending", "failed", "wipe", true},
		{"ok/install done", "installing", "configuring", "provision", true},
		{"ok/NoCloud delivered during the install", "installing", "active", "provision", true},
		{"ok/delivered", "configuring", "active", "provision", true},
		{"ok/configuration lost", "configuring", "failed", "provision", true},
		{"ok/wiped", "wiping", "wiped", "wipe", true},
		{"ok/retired", "wiping", "retired", "retire", true},
		{"ok/a wipe unconfirmed", "wiping", "unconfirmed", "wipe", true},
		{"ok/a retirement unconfirmed", "wiping", "unconfirmed", "retire", true},
		{"ok/a wipe asked again after an unconfirmed one is refused", "unconfirmed", "rejected", "wipe", true},
		{"ok/NoCloud install failed after delivery", "active", "failed", "provision", true},
		{"ok/a refused request after a terminal one", "active", "rejected", "provision", true},
		{"ok/a refused first request", "", "rejected", "", true},
		{"refuse/installing without attestation", "pending", "configuring", "provision", false},
		{"refuse/attest installs", "pending", "installing", "attest", false},
		{"refuse/wipe ends retired", "wiping", "retired", "wipe", false},
		{"refuse/retirement ends wiped", "wiping", "wiped", "retire", false},
		{"refuse/an unconfirmed wipe becomes wiped without a new request", "unconfirmed", "wiped", "wipe", false},
		{"refuse/a provision ends unconfirmed", "installing", "unconfirmed", "provision", false},
		{"refuse/a running request rejected", "installing", "rejected", "provision", false},
		{"refuse/active again without a request", "failed", "active", "provision", false},
		{"refuse/back to pending without a new request", "installing", "pending", "provision", false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if got := allowedMove(r.from, r.to, r.action); got != r.ok {
				t.Errorf("allowedMove(%q → %q, %s) = %v, want %v", r.from, r.to, r.action, got, r.ok)
			}
		})
	}
}

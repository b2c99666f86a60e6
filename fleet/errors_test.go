package fleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
)

// TestAsRefusal: the one conversion of the domain's refusals. An attest check's
// refusal, however deep in the chain, reads as the 400 whose code is its check; a fleet refusal
// reads as itself, also when it wraps an attest one; anything else is no refusal (a 5xx).
func TestAsRefusal(t *testing.T) {
	checked := &attest.Refusal{Check: attest.CheckQuote, Msg: "the quote's nonce is not the token's"}
	own := &fleet.Refusal{Class: fleet.RefusedConflict, Code: "config_rejected", Msg: "rejected", Err: checked}
	for _, r := range []struct {
		name      string
		err       error
		wantOK    bool
		wantClass fleet.RefusalClass
		wantCode  string
	}{
		{"refuse/an attest check's refusal, wrapped", fmt.Errorf("verify: %w", checked), true, fleet.RefusedInvalid, string(attest.CheckQuote)},
		{"refuse/a fleet refusal wrapping an attest one is itself", own, true, fleet.RefusedConflict, "config_rejected"},
		{"ok/fleetd's own failure is no refusal", fmt.Errorf("read device: %w", fleet.ErrNetBoxUnavailable), false, 0, ""},
		{"ok/no error", nil, false, 0, ""},
	} {
		t.Run(r.name, func(t *testing.T) {
			got, ok := fleet.AsRefusal(r.err)
			if ok != r.wantOK || ok && (got.Class != r.wantClass || got.Code != r.wantCode || !errors.Is(got, r.err)) {
				t.Fatalf("AsRefusal(%v) = %+v, %v; want class %d code %q: %v", r.err, got, ok, r.wantClass, r.wantCode, r.wantOK)
			}
		})
	}
}

// TestRefusalError: a refusal's text in the log is its code and message, and the detail it holds
// for the log when it holds one.
func TestRefusalError(t *testing.T) {
	for _, r := range []struct {
		name string
		ref  *fleet.Refusal
		want string
	}{
		{"refuse/code and message", fleet.Refuse(fleet.RefusedNotFound, "unknown_address", "no device has %s", "10.9.9.9"), "unknown_address: no device has 10.9.9.9"},
		{"refuse/with its detail", &fleet.Refusal{Code: "identity_unreadable", Msg: "cannot be read", Err: errors.New("version 2")}, "identity_unreadable: cannot be read: version 2"},
	} {
		if got := r.ref.Error(); got != r.want {
			t.Errorf("%s: %q, want %q", r.name, got, r.want)
		}
	}
}

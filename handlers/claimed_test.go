package handlers_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestClaimedInputIsNotEchoed sends the enrollment what an attacker on the lab network would:
// a TPM version of 60 KiB, a device name of 60 KiB, an EK the device does not approve. Each is
// refused with its code and the code's fixed sentence; nothing the caller sent and nothing of
// the device's declaration (its approved ek_sha256) is in the answer, in fleet_message or in a
// journal entry, and what is written into NetBox is within its caps (docs/security.md, "Claimed input").
func TestClaimedInputIsNotEchoed(t *testing.T) {
	approved := strings.Repeat("ab", 32)
	d := fleettest.Declared(12, "node-a")
	d.Declared.EKHashes = []string{approved}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	f := newFleetd(t, catalog(fleet.SecureBootAny), d)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherEK, _ := x509.MarshalPKIXPublicKey(key.Public())
	const marker = "ZZclaimedZZ"
	long := strings.Repeat(marker, 60<<10/len(marker))
	rows := []struct {
		name string
		req  api.ChallengeRequest
		code string
	}{
		{"refuse/a TPM version of 60 KiB", api.ChallengeRequest{Device: "node-a", Request: d.Owned.Request, TPMVersion: long}, "tpm_unsupported"},
		{"refuse/a device name of 60 KiB", api.ChallengeRequest{Device: long, Request: d.Owned.Request, TPMVersion: "1.2"}, "unknown_device"},
		{"refuse/an EK the device does not approve", api.ChallengeRequest{Device: "node-a", Request: d.Owned.Request, TPMVersion: "2.0",
			EK: &api.EK{Public: otherEK}, AK: &api.AKParams{}}, "ek_not_approved"},
	}
	for _, r := range rows {
		var e api.Error
		status := postJSON(t, f.url+api.PathAttestChallenge, r.req, &e)
		if status/100 != 4 || e.Code != r.code {
			t.Fatalf("%s: %d %s, want a 4xx %s", r.name, status, e.Code, r.code)
		}
		if e.Message != fleet.PublicSentence(r.code) {
			t.Errorf("%s: message %q, want the code's fixed sentence %q", r.name, e.Message, fleet.PublicSentence(r.code))
		}
	}
	got := f.inv.Get(12)
	written := append([]string{got.Owned.Message}, f.inv.JournalOf(12)...)
	for _, w := range written {
		if strings.Contains(w, marker) || strings.Contains(w, approved) {
			t.Errorf("NetBox holds %.200q: claimed input or the declaration", w)
		}
	}
	if len(got.Owned.Message) > fleet.MaxMessage {
		t.Errorf("fleet_message is %d bytes, over the cap of %d", len(got.Owned.Message), fleet.MaxMessage)
	}
	if got.Owned.Message != "" || len(f.inv.JournalOf(12)) != 0 {
		t.Errorf("fleet_message %q, journal %q: a refusal before credential activation writes nothing", got.Owned.Message, f.inv.JournalOf(12))
	}
}

package fleet_test

import (
	"regexp"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestBootstrapTokenDerivation: a device's token has Kubernetes' form, is the same whenever it is
// derived for the same device, request and key (the attestation and the fetch agree without
// storing it), and differs for another device, another request or another key; a key the ring no
// longer lists derives nothing.
func TestBootstrapTokenDerivation(t *testing.T) {
	form := regexp.MustCompile(`\A[a-z0-9]{6}\.[a-z0-9]{16}\z`) // cluster-bootstrap's BootstrapTokenPattern
	other := fleet.SealKey{ID: "k2", Secret: []byte("another seal secret of thirty-two bytes or more")}
	keys, err := fleet.NewSealKeys(fleettest.SealKey(), other)
	if err != nil {
		t.Fatal(err)
	}
	k1 := fleettest.SealKey().ID
	derive := func(key string, id int64, req string) fleet.BootstrapToken {
		t.Helper()
		tok, err := keys.BootstrapToken(key, id, req)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	a := derive(k1, 12, "provision-aaaaaaaa")
	if !form.MatchString(a.String()) || a.Username() != "system:bootstrap:"+a.ID {
		t.Fatalf("token %q (user %s) is not a bootstrap token", a, a.Username())
	}
	if again := derive(k1, 12, "provision-aaaaaaaa"); again != a {
		t.Errorf("derived twice: %s, then %s", a, again)
	}
	seen := map[string]string{a.ID: "device 12's request"}
	for name, tok := range map[string]fleet.BootstrapToken{
		"device 13, same request id": derive(k1, 13, "provision-aaaaaaaa"),
		"device 12's next request":   derive(k1, 12, "provision-bbbbbbbb"),
		"device 12 under key k2":     derive("k2", 12, "provision-aaaaaaaa"),
	} {
		if !form.MatchString(tok.String()) {
			t.Errorf("%s: %q is not a bootstrap token", name, tok)
		}
		if prev, dup := seen[tok.ID]; dup {
			t.Errorf("%s has the token id of %s", name, prev)
		}
		seen[tok.ID] = name
	}
	if _, err := keys.BootstrapToken("gone", 12, "provision-aaaaaaaa"); err == nil {
		t.Error("a key the ring does not list derived a token")
	}
	// Over many devices every one of the 36 characters appears at every position of the id.
	for pos := 0; pos < 6; pos++ {
		chars := map[byte]bool{}
		for id := int64(0); id < 2000; id++ {
			chars[derive(k1, id, "provision-aaaaaaaa").ID[pos]] = true
		}
		if len(chars) != 36 {
			t.Errorf("position %d of the id took %d of the 36 characters over 2000 devices", pos, len(chars))
		}
	}
}

package handlers_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// FuzzNodeBodies posts arbitrary bodies to the node routes that take one, for a device that has a
// request waiting: whatever the bytes, fleetd answers a 4xx (never a 5xx or a panic), and nothing
// is issued, recorded as attested, or authorized.
func FuzzNodeBodies(f *testing.F) {
	paths := []string{"/v1/attest/challenge", "/v1/attest/evidence", "/v1/boot-check"}
	seeds := []string{`{}`, `null`, `[]`, `{"device": "node-a", "tpm_version": "2.0"}`,
		`{"device": "node-a", "tpm_version": "2.0", "ek": {"public": "AAAA"}, "ak": {"public": "AAAA", "create_data": "", "create_attestation": "", "create_signature": ""}}`,
		`{"device": "node-a", "tpm_version": "1.2"}`,
		`{"device": "node-a", "token": "x", "secret": "AAAA", "platform": {"ak_public": "AAAA", "quotes": [{"quote": "AAAA", "signature": "AAAA"}], "pcrs": [{"index": 0, "alg": "sha256", "digest": "AAAA"}], "event_log": "AAAA"}, "ldevid": {}, "smbios": {"uuid": "u"}, "disks": [{"serial": "S4EWNX0R123456", "path": "/dev/disk/by-id/x"}]}`,
		`{"token": "x", "lak_chain": ["AAAA"], "platform": {"quotes": []}}`,
	}
	for i := range paths {
		for _, s := range seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	d := fleettest.Declared(12, "node-a")
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	fd := newFleetd(f, catalog(fleet.SecureBootAny), d)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := paths[int(route)%len(paths)]
		resp, err := http.Post(fd.url+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Fatalf("POST %s %q: %d, want a 4xx", path, body, resp.StatusCode)
		}
		got := fd.inv.Get(12)
		if got.Owned.State != fleet.StatePending || got.Owned.LDevIDSerial != "" || got.Owned.LAKSerial != "" {
			t.Fatalf("POST %s %q changed the device: %+v", path, body, got.Owned)
		}
	})
}

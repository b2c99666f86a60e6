package fleet_test

import (
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
)

// TestNodeFiles: the files a configuration delivers into the node's directory from its identity
// material: the LAK's two always, and the LDevID's three only when the material holds its chain
// and both of its key blobs (an older fleetd recorded no private blob: the node keeps its own).
func TestNodeFiles(t *testing.T) {
	full := fleet.IdentityMaterial{
		LAK:    fleet.LAKMaterial{Chain: [][]byte{[]byte("lak leaf"), []byte("lak ca")}, Blob: []byte(`{"KeyEncoding":1}`)},
		LDevID: fleet.LDevIDMaterial{Chain: [][]byte{[]byte("ldevid leaf")}, Public: []byte("tpmt public"), Private: []byte("tpm2b private")},
	}
	lakOnly := []string{fleet.NodeFileLAKCert, fleet.NodeFileLAKBlob}
	for _, tc := range []struct {
		name string
		edit func(m *fleet.IdentityMaterial)
		want []string
	}{
		{"ok/the LAK's files and the LDevID's", func(*fleet.IdentityMaterial) {},
			[]string{fleet.NodeFileLAKCert, fleet.NodeFileLAKBlob, fleet.NodeFileLDevIDCert, fleet.NodeFileLDevIDPub, fleet.NodeFileLDevIDPriv}},
		{"refuse/no LDevID private blob: the LAK's files only", func(m *fleet.IdentityMaterial) { m.LDevID.Private = nil }, lakOnly},
		{"refuse/no LDevID public blob: the LAK's files only", func(m *fleet.IdentityMaterial) { m.LDevID.Public = nil }, lakOnly},
		{"refuse/no LDevID chain: the LAK's files only", func(m *fleet.IdentityMaterial) { m.LDevID.Chain = nil }, lakOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := full
			tc.edit(&m)
			var names []string
			for _, f := range m.NodeFiles() {
				names = append(names, f.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Fatalf("files %v, want %v", names, tc.want)
			}
			if b, _ := pem.Decode(m.NodeFiles()[0].Data); b == nil || string(b.Bytes) != "lak leaf" {
				t.Errorf("%s does not begin with the LAK leaf as PEM", fleet.NodeFileLAKCert)
			}
		})
	}
}

// TestIdentityNameKeepsOlderSeals: fleet_identity as a fleetd before the recorded name wrote it
// decodes with no name (never renamed, fleet.AttestedAs) and encodes back to its very bytes, so
// the seal over it still verifies after the upgrade; a recorded name is kept across the round trip.
func TestIdentityNameKeepsOlderSeals(t *testing.T) {
	const older = `{"version":1,"request":"provision-aaaaaaaa","issued":"2026-01-02T03:04:05Z","expires":"2026-01-02T04:04:05Z",` +
		`"uuid_sha256":"ab","lak":{"chain":["bGFr"],"blob":"Yg=="},"ldevid":{"chain":null}}`
	var m fleet.IdentityMaterial
	if err := json.Unmarshal([]byte(older), &m); err != nil {
		t.Fatal(err)
	}
	if b, err := json.Marshal(m); err != nil || string(b) != older {
		t.Fatalf("an older identity encodes to %s (%v), want its own bytes %s", b, err, older)
	}
	if _, renamed := fleet.AttestedAs(fleet.Device{Name: "node-x", Owned: fleet.Owned{Identity: m}}); renamed {
		t.Error("an identity recorded without a name counts as renamed")
	}
	m.Name = "node-a"
	var back fleet.IdentityMaterial
	if b, err := json.Marshal(m); err != nil || json.Unmarshal(b, &back) != nil || back.Name != "node-a" {
		t.Fatalf("the recorded name does not survive its JSON: %+v", back)
	}
	for _, tc := range []struct {
		name    string
		renamed bool
	}{{"node-a", false}, {"Node-A", false}, {"node-b", true}, {"", true}} {
		if attested, renamed := fleet.AttestedAs(fleet.Device{Name: tc.name, Owned: fleet.Owned{Identity: back}}); renamed != tc.renamed || renamed && attested != "node-a" {
			t.Errorf("device %q attested as node-a: renamed %v (%q), want %v", tc.name, renamed, attested, tc.renamed)
		}
	}
}

package fleet_test

import (
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

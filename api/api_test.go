package api_test

import (
	"crypto"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/folly-infra/fleetd/api"
)

// TestPlatformRoundTrip checks that platform parameters survive the wire unchanged.
func TestPlatformRoundTrip(t *testing.T) {
	in := &attest.PlatformParameters{
		Public:   []byte{1, 2},
		Quotes:   []attest.Quote{{Quote: []byte{3}, Signature: []byte{4}}},
		PCRs:     []attest.PCR{{Index: 0, DigestAlg: crypto.SHA256, Digest: []byte{5}}, {Index: 23, DigestAlg: crypto.SHA1, Digest: []byte{6}}},
		EventLog: []byte{7},
	}
	b, err := json.Marshal(api.NewPlatform(in))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"alg":"sha256"`) {
		t.Errorf("PCR algorithms are not named on the wire: %s", b)
	}
	var wire api.Platform
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	out, err := wire.Attest()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*in, out, cmpopts.IgnoreUnexported(attest.PCR{})); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
}

// TestPlatformRefusesUnknownAlgorithm checks that a PCR of an unknown bank is refused.
func TestPlatformRefusesUnknownAlgorithm(t *testing.T) {
	p := api.Platform{PCRs: []api.PCR{{Index: 1, Alg: "md5"}}}
	if _, err := p.Attest(); err == nil || !strings.Contains(err.Error(), "md5") {
		t.Errorf("err = %v, want a refusal naming md5", err)
	}
}

// TestErrorBody checks the error body's JSON keys (docs/design.md §6).
func TestErrorBody(t *testing.T) {
	b, _ := json.Marshal(api.Error{Code: "ek_not_approved", Message: "The EK is not approved."})
	if string(b) != `{"error":"ek_not_approved","message":"The EK is not approved."}` {
		t.Errorf("error body = %s", b)
	}
}

// TestTextForms: the node files a Talos config delivers in their text form are the ones
// IsTextForm names, each once, the key blobs before the LDevID certificate; lak.blob, which never
// changes, is delivered as itself.
func TestTextForms(t *testing.T) {
	forms := api.TextForms()
	seen := map[string]int{}
	for i, n := range forms {
		if !api.IsTextForm(n) {
			t.Errorf("%s is in TextForms but not IsTextForm", n)
		}
		if _, twice := seen[n]; twice {
			t.Errorf("%s is listed twice", n)
		}
		seen[n] = i
	}
	for _, n := range []string{api.NodeFileLAKBlob, "disk", "", api.NodeFileLAKCert + api.TextFormSuffix} {
		if api.IsTextForm(n) {
			t.Errorf("IsTextForm(%q) = true", n)
		}
	}
	if len(forms) != 4 || seen[api.NodeFileLDevIDPub] > seen[api.NodeFileLDevIDCert] || seen[api.NodeFileLDevIDPriv] > seen[api.NodeFileLDevIDCert] {
		t.Errorf("TextForms = %v, want the four with the LDevID blobs before its certificate", forms)
	}
}

// TestReceiptRequestBeginsWithItsToken: a receipt is encoded with its device and token first,
// which fleetd reads and authenticates before the rest of the body (docs/http.md, "Wipe receipts").
func TestReceiptRequestBeginsWithItsToken(t *testing.T) {
	b, err := json.Marshal(api.ReceiptRequest{Device: "node-a", Token: "tok", Request: "wipe-k3f9x2mq", DiskSerial: "S1", Method: "blkdiscard",
		Result: "erased", Bytes: 1 << 62, Quote: api.Quote{Quote: []byte{1}, Signature: []byte{2}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"device":"node-a","token":"tok","request":"wipe-k3f9x2mq",`; !strings.HasPrefix(string(b), want) {
		t.Errorf("receipt = %s, want it to begin %s", b, want)
	}
	var back api.ReceiptRequest
	if err := json.Unmarshal(b, &back); err != nil || back.Bytes != 1<<62 {
		t.Errorf("bytes %d (%v) after the wire, want 2^62 exactly", back.Bytes, err)
	}
}

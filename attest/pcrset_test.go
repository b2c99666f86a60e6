package attest

import (
	"crypto"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-attestation/attest"
)

// TestCheckPCRSet: the PCR values a node sends are refused before any quote is read when one is
// given twice in a bank or names an index or a hash no PC-client TPM bank has; two full banks pass.
func TestCheckPCRSet(t *testing.T) {
	bank := func(alg crypto.Hash) []attest.PCR {
		var b []attest.PCR
		for i := range pcrCount {
			b = append(b, attest.PCR{Index: i, DigestAlg: alg, Digest: make([]byte, alg.Size())})
		}
		return b
	}
	both := append(bank(crypto.SHA1), bank(crypto.SHA256)...)
	tests := []struct {
		name string
		pcrs []attest.PCR
		want string // "" passes
	}{
		{"ok/two-banks", both, ""},
		{"ok/none", nil, ""},
		{"refuse/given-twice", append(bank(crypto.SHA256), attest.PCR{Index: 7, DigestAlg: crypto.SHA256}), "PCR 7 (SHA-256) is given more than once"},
		{"refuse/index-24", append(bank(crypto.SHA256), attest.PCR{Index: 24, DigestAlg: crypto.SHA256}), "PCR 24 (SHA-256) is not one of a TPM's 24 PCRs"},
		{"refuse/negative-index", []attest.PCR{{Index: -1, DigestAlg: crypto.SHA256}}, "PCR -1 (SHA-256) is not one of"},
		{"refuse/unknown-hash", []attest.PCR{{Index: 0, DigestAlg: crypto.Hash(200)}}, "PCR 0 (unknown hash value 200) is not one of"},
		{"refuse/the-hash-after-the-last-Go-knows", []attest.PCR{{Index: 0, DigestAlg: crypto.BLAKE2b_512 + 1}}, "PCR 0 (unknown hash value 20) is not one of"},
		// A bank of a hash Go knows passes here, whether or not a TPM has it: the quotes must
		// then cover it (AKPublic.VerifyAll refuses a PCR no quote covers).
		{"ok/the-last-hash-Go-knows", bank(crypto.BLAKE2b_512), ""},
		{"ok/index-0-and-23", []attest.PCR{{Index: 0, DigestAlg: crypto.SHA256}, {Index: 23, DigestAlg: crypto.SHA256}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPCRSet(tc.pcrs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkPCRSet: %v, want none", err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Check != CheckQuote || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkPCRSet: %v, want a %s refusal saying %q", err, CheckQuote, tc.want)
			}
		})
	}
}

package attest_test

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// refusal is one row: a change to a valid enrollment and the check that must refuse it.
type refusal struct {
	name string
	// challenge rows change the first round trip; the others change the second.
	challenge func(t *testing.T, s *scenario, c *challengeClaim)
	evidence  func(t *testing.T, s *scenario, c *evidenceClaim)
	want      attest.Check
	skip      func(s *scenario) bool
}

// runRefusals runs every refusal row against a scenario's fleetd. Each row starts from the valid
// claims and node-a as declared, so it proves that exactly its change is what the named check
// refuses; and each proves the refusal's effects: a 400 with the check as its code and the
// code's fixed sentence, no certificate, no disk, NetBox's state, status, serials and identity
// untouched, no Workflow; before credential activation (the challenge, the token, the
// activation) nothing written at all, after it only fleet_message and one journal entry naming
// the code (docs/enrollment.md, "Refusals").
func runRefusals(t *testing.T, s *scenario) {
	for _, r := range append(challengeRefusals(), evidenceRefusals()...) {
		t.Run(r.name, func(t *testing.T) {
			if r.skip != nil && r.skip(s) {
				t.Skip("not applicable to this machine")
			}
			saved := *s.v
			devices := []fleet.Device{s.v.f.Inv.Get(idNodeA), s.v.f.Inv.Get(idNodeB)}
			journal := len(s.v.f.Inv.JournalOf(idNodeA))
			defer func() {
				*s.v = saved
				for _, d := range devices {
					s.v.f.Inv.Set(d)
				}
			}()
			var a any
			var err error
			if r.challenge != nil {
				c := s.c1
				r.challenge(t, s, &c)
				a, err = s.v.challenge(c)
			} else {
				c := s.c2
				c.platform.PCRs = slices.Clone(c.platform.PCRs)
				r.evidence(t, s, &c)
				a, err = s.v.evidence(c)
			}
			ref, ok := asRefused(err)
			if !ok || ref.status != http.StatusBadRequest || ref.body.Code != string(r.want) || ref.body.Message != fleet.PublicSentence(string(r.want)) {
				t.Fatalf("answer %+v, err %v; want a 400 %s refusal with its fixed sentence", a, err, r.want)
			}
			t.Logf("refused: %v", ref)
			if s.v.f != saved.f {
				journal = 0 // the row's own fleetd
			}
			checkNothingWritten(t, s.v.f, journal, before(r), string(r.want))
		})
	}
}

// before says whether a row's check comes before credential activation, where nothing proved
// the caller holds the approved EK's TPM.
func before(r refusal) bool {
	switch r.want {
	case attest.CheckToken, attest.CheckTokenExpired, attest.CheckTokenBinding, attest.CheckActivation:
		return true
	}
	return r.challenge != nil
}

// checkNothingWritten checks node-a in the NetBox of the fleetd that refused, whose journal held
// journal entries before: still pending for its request, nothing issued or recorded, no
// Workflow, and only the refusal's message and one journal entry when the refusal came after
// activation.
func checkNothingWritten(t *testing.T, f *handlerstest.Fleetd, journal int, beforeActivation bool, code string) {
	t.Helper()
	d, j := f.Inv.Get(idNodeA), f.Inv.JournalOf(idNodeA)[journal:]
	if d.Owned.State != fleet.StatePending || d.Owned.Request != requestID || d.Status != fleet.StatusStaged ||
		d.Owned.LDevIDSerial != "" || d.Owned.LAKSerial != "" || !d.Owned.Identity.Empty() {
		t.Errorf("node-a after the refusal: state %q request %q status %q serials %q %q identity recorded %v; want it pending as before, nothing issued",
			d.Owned.State, d.Owned.Request, d.Status, d.Owned.LDevIDSerial, d.Owned.LAKSerial, !d.Owned.Identity.Empty())
	}
	if n := f.Installer.Creates(); n != 0 {
		t.Errorf("%d Workflows created by a refused enrollment", n)
	}
	switch {
	case beforeActivation && (d.Owned.Message != "" || len(j) != 0):
		t.Errorf("a refusal before activation wrote message %q, journal %q; want nothing written", d.Owned.Message, j)
	case !beforeActivation && (!strings.Contains(d.Owned.Message, "("+code+")") || len(j) != 1 ||
		!strings.HasPrefix(j[0], "danger: ") || !strings.Contains(j[0], "("+code+")")):
		t.Errorf("a refusal after activation left message %q, journal %q; want both to name %s, one danger entry", d.Owned.Message, j, code)
	}
}

func challengeRefusals() []refusal {
	return []refusal{
		{name: "refuse/tpm-1.2", want: attest.CheckTPMVersion,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) { c.tpmVersion = "1.2" }},
		{name: "refuse/no-tpm", want: attest.CheckTPMVersion,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) { c.tpmVersion = "" }},
		{name: "refuse/unknown-ek", want: attest.CheckEKApproved,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				s.v.edit(idNodeA, func(d *fleet.Device) { d.Declared.EKHashes = []string{sha256Hex([]byte("another machine's EK"))} })
			}},
		{name: "refuse/ek-not-der", want: attest.CheckEKMalformed,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) { c.ekPub = c.ekPub[:40] }},
		{name: "refuse/ek-cert-from-untrusted-ca", want: attest.CheckEKCertChain,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				c.ekCert = untrustedEKCert(t, c.ekPub)
				useEKPolicy(t, s, attest.EKPolicyHashCert, swtpmBundle(t))
			}},
		{name: "refuse/ek-cert-bundle-without-issuing-ca", want: attest.CheckEKCertChain,
			skip: func(s *scenario) bool { return s.c1.ekCert == nil },
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				useEKPolicy(t, s, attest.EKPolicyHashCert, swtpmRootOnly(t))
			}},
		{name: "refuse/ek-cert-for-another-key", want: attest.CheckEKCertKey,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				c.ekCert = untrustedEKCert(t, nil)
			}},
		{name: "refuse/ak-not-restricted", want: attest.CheckAK,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				c.ak = tpmKeyParams(t, s.m, tpm2.FlagSign|tpm2.FlagFixedTPM|tpm2.FlagFixedParent|
					tpm2.FlagSensitiveDataOrigin|tpm2.FlagUserWithAuth)
			}},
		{name: "refuse/ak-not-fixedtpm", want: attest.CheckAK,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				c.ak = tpmKeyParams(t, s.m, tpm2.FlagSign|tpm2.FlagRestricted|
					tpm2.FlagSensitiveDataOrigin|tpm2.FlagUserWithAuth)
			}},
		{name: "refuse/ak-creation-attestation-altered", want: attest.CheckAK,
			challenge: func(t *testing.T, s *scenario, c *challengeClaim) {
				c.ak.CreateAttestation = flipLast(c.ak.CreateAttestation)
			}},
	}
}

func evidenceRefusals() []refusal {
	return []refusal{
		{name: "refuse/wrong-activation-secret", want: attest.CheckActivation,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.secret = flipLast(c.secret) }},
		{name: "refuse/token-altered", want: attest.CheckToken,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				b := []byte(c.token)
				b[len(b)/2] ^= 0x01
				c.token = string(b)
			}},
		{name: "refuse/token-from-another-fleetd", want: attest.CheckToken,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				s.v.another(t, func(c *handlerstest.Config) { c.TokenKey = bytes.Repeat([]byte{8}, attest.TokenKeySize) })
			}},
		{name: "refuse/token-expired", want: attest.CheckTokenExpired,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				s.v.clock.t = testTime.Add(10 * time.Minute)
				t.Cleanup(func() { s.v.clock.t = testTime })
			}},
		{name: "refuse/token-replayed-for-another-device", want: attest.CheckTokenBinding,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.device = "node-b" }},
		{name: "refuse/token-ek-no-longer-approved", want: attest.CheckTokenBinding,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				s.v.edit(idNodeA, func(d *fleet.Device) { d.Declared.EKHashes = d.Declared.EKHashes[:1] })
			}},
		{name: "refuse/token-with-another-ak", want: attest.CheckTokenBinding,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.platform.Public = s.otherAK.Public }},
		{name: "refuse/quote-with-another-nonce", want: attest.CheckQuote,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.platform = *s.pOther }},
		{name: "refuse/pcr-does-not-match-quote", want: attest.CheckQuote,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				i := pcrAt(t, c.platform.PCRs, 0)
				c.platform.PCRs[i].Digest = bytes.Repeat([]byte{0xaa}, 32)
			}},
		{name: "refuse/pcr-given-twice", want: attest.CheckQuote,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				p := c.platform.PCRs[pcrAt(t, c.platform.PCRs, 4)]
				p.Digest = bytes.Repeat([]byte{0xbb}, 32)
				c.platform.PCRs = append([]ga.PCR{p}, c.platform.PCRs...)
			}},
		{name: "refuse/pcr-index-out-of-range", want: attest.CheckQuote,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				p := c.platform.PCRs[pcrAt(t, c.platform.PCRs, 4)]
				p.Index = 24
				c.platform.PCRs = append(c.platform.PCRs, p)
			}},
		{name: "refuse/sha256-pcr-missing", want: attest.CheckQuote,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.platform.PCRs = slices.Delete(c.platform.PCRs, pcrAt(t, c.platform.PCRs, 7), pcrAt(t, c.platform.PCRs, 7)+1)
			}},
		{name: "refuse/eventlog-of-another-boot", want: attest.CheckEventLog,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.platform.EventLog = eventlogs.Ubuntu2104NoDBX }},
		{name: "refuse/eventlog-truncated", want: attest.CheckEventLog,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.platform.EventLog = c.platform.EventLog[:len(c.platform.EventLog)/2]
			}},
		{name: "refuse/secure-boot-off-where-required", want: attest.CheckSecureBoot,
			skip: func(s *scenario) bool { return s.v.f.Inv.Get(idNodeA).Declared.Class == classSecureBoot },
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				s.v.edit(idNodeA, func(d *fleet.Device) { d.Declared.Class = classSecureBoot }) // the token binds no class
			}},
		{name: "refuse/ldevid-certified-with-another-nonce", want: attest.CheckLDevID,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.ldevid = s.ldOther.Certification }},
		{name: "refuse/ldevid-certification-altered", want: attest.CheckLDevID,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.ldevid.CreateAttestation = flipLast(c.ldevid.CreateAttestation)
			}},
		{name: "refuse/ldevid-restricted", want: attest.CheckLDevID,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.ldevid.Public = setAttributes(t, c.ldevid.Public, tpm2.FlagRestricted, 0)
			}},
		{name: "refuse/ldevid-not-fixedtpm", want: attest.CheckLDevID,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.ldevid.Public = setAttributes(t, c.ldevid.Public, 0, tpm2.FlagFixedTPM)
			}},
		{name: "refuse/disk-absent", want: attest.CheckDiskAbsent,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) { c.disks = disks[1:] }},
		{name: "refuse/disk-twice", want: attest.CheckDiskAmbiguous,
			evidence: func(t *testing.T, s *scenario, c *evidenceClaim) {
				c.disks = append(slices.Clone(disks), attest.Disk{Serial: disks[0].Serial, Path: "/dev/disk/by-id/usb-Clone_" + disks[0].Serial})
			}},
	}
}

func pcrAt(t *testing.T, pcrs []ga.PCR, index int) int {
	t.Helper()
	for i, p := range pcrs {
		if p.Index == index && len(p.Digest) == sha256.Size {
			return i
		}
	}
	t.Fatalf("no SHA-256 PCR %d", index)
	return -1
}

func flipLast(b []byte) []byte {
	b = slices.Clone(b)
	b[len(b)-1] ^= 0x01
	return b
}

// setAttributes re-encodes a TPMT_PUBLIC with attributes added and removed.
func setAttributes(t *testing.T, public []byte, add, remove tpm2.KeyProp) []byte {
	t.Helper()
	pub, err := tpm2.DecodePublic(public)
	if err != nil {
		t.Fatal(err)
	}
	pub.Attributes = pub.Attributes&^remove | add
	out, err := pub.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

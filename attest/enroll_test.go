package attest_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/agent"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/pki"
)

// scenario is one machine's complete, valid enrollment, plus the TPM output the refusal rows
// substitute for parts of it.
type scenario struct {
	v        *verifier
	c1       challengeClaim
	a1       *challengeAnswer
	c2       evidenceClaim
	m        *machine
	ak       *ga.AK
	otherAK  ga.AttestationParameters // a second AK of the same TPM
	pOther   *ga.PlatformParameters   // a quote over another nonce
	ldOther  *agent.LDevIDKey         // an LDevID certified with another nonce
	ekSHA256 string
}

var disks = []attest.Disk{
	{Serial: "S3Z9NB0K123456", Path: "/dev/disk/by-id/nvme-Samsung_SSD_970_S3Z9NB0K123456"},
	{Serial: "WD-WCC4N7XYZ", Path: "/dev/disk/by-id/ata-WDC_WD40EFRX_WD-WCC4N7XYZ"},
}

// newScenario runs the machine's side of both round trips against v.
func newScenario(t testing.TB, m *machine, v *verifier, secureBoot bool) *scenario {
	t.Helper()
	s := &scenario{v: v, m: m}
	ekPub, ekCert, err := m.EK()
	if err != nil {
		t.Fatal(err)
	}
	s.ekSHA256 = sha256Hex(ekPub)
	v.declare(s.ekSHA256, secureBoot)
	if s.ak, err = m.NewAK(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.ak.Close(m.Attest()) })
	s.c1 = challengeClaim{device: "node-a", request: requestID, tpmVersion: "2.0", ekPub: ekPub, ekCert: ekCert, ak: s.ak.AttestationParameters()}
	if s.a1, err = v.challenge(s.c1); err != nil {
		t.Fatal(err)
	}
	secret, err := m.ActivateCredential(s.ak, s.a1.ec)
	if err != nil {
		t.Fatal(err)
	}
	log := eventLogOf(t, m)
	pp, err := m.AttestPlatform(s.ak, s.a1.nonce, log)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := m.NewLDevID(s.ak, s.a1.nonce)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := s.ak.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s.c2 = evidenceClaim{device: "node-a", token: s.a1.token, secret: secret, platform: *pp,
		ldevid: ld.Certification, ldevidPrivate: ld.Private, lakBlob: blob, disks: disks}
	other := slices.Clone(s.a1.nonce)
	other[0] ^= 0xff
	if s.pOther, err = m.AttestPlatform(s.ak, other, log); err != nil {
		t.Fatal(err)
	}
	if s.ldOther, err = m.NewLDevID(s.ak, other); err != nil {
		t.Fatal(err)
	}
	ak2, err := m.NewAK()
	if err != nil {
		t.Fatal(err)
	}
	s.otherAK = ak2.AttestationParameters()
	_ = ak2.Close(m.Attest())
	return s
}

func eventLogOf(t testing.TB, m *machine) []byte {
	t.Helper()
	log, err := m.Attest().MeasurementLog()
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// TestEnrollSimulator runs a whole enrollment on the simulator with a Secure Boot log, under
// the hash policy (the simulator has no EK certificate), and every refusal after it, each through
// the real fleetd's routes and service (verifier_test.go).
func TestEnrollSimulator(t *testing.T) {
	m := simMachine(t, eventlogs.RHEL8SecureBoot)
	v := newVerifier(t, attest.EKPolicyHash, nil)
	s := newScenario(t, m, v, true)
	t.Run("ok/simulator-secure-boot", func(t *testing.T) {
		a := s.mustEnroll(t, "enabled")
		if got, want := hwSerial(t, a.ldevid), sha256.Sum256(s.c1.ekPub); !bytes.Equal(got, want[:]) {
			t.Errorf("hwSerialNum = %x, want the SHA-256 of the EK SPKI %x when there is no EK certificate", got, want)
		}
		if got := s.v.f.Inv.Get(idNodeA).Owned.Facts.Proved.TPMVersion; got != "2.0" {
			t.Errorf("proved tpm_version %q, want 2.0 (no EK certificate: the protocol alone)", got)
		}
	})
	runRefusals(t, s)
}

// TestEnrollSwtpm runs a whole enrollment on swtpm with an EK certificate under hash+cert, a log
// without Secure Boot and a class that does not require it, and every refusal after it, as
// TestEnrollSimulator does.
func TestEnrollSwtpm(t *testing.T) {
	ca, err := swtpm.ReadEKCA(swtpmCADir)
	if err != nil {
		t.Fatal(err)
	}
	m := swtpmMachine(t, eventlogs.Ubuntu2104NoSecureBoot)
	v := newVerifier(t, attest.EKPolicyHashCert, ca.BundlePEM())
	s := newScenario(t, m, v, false)
	t.Run("ok/swtpm-ek-cert", func(t *testing.T) {
		a := s.mustEnroll(t, "disabled")
		want := "00001014:" // swtpm's manufacturer code, then the EK certificate's AKI and serial
		if got := string(hwSerial(t, a.ldevid)); !strings.HasPrefix(got, want) || strings.Count(got, ":") != 2 {
			t.Errorf("hwSerialNum = %q, want %q<aki hex>:<serial hex>", got, want)
		}
		// swtpm_cert certifies TPM 2.0, level 0, revision 164 (tcg-at-tpmSpecification).
		if got := s.v.f.Inv.Get(idNodeA).Owned.Facts.Proved.TPMVersion; got != "2.0 level 0 revision 1.64" {
			t.Errorf("proved tpm_version %q, want the verified EK certificate's 2.0 level 0 revision 1.64", got)
		}
	})
	runRefusals(t, s)
}

// mustEnroll sends the valid evidence and checks what the fleetd under test issued, authorized
// and recorded; it then puts node-a back as it was (pending), so the refusal rows start from it.
func (s *scenario) mustEnroll(t *testing.T, secureBoot string) *evidenceAnswer {
	t.Helper()
	before := s.v.f.Inv.Get(idNodeA)
	t.Cleanup(func() { s.v.f.Inv.Set(before) })
	a, err := s.v.evidence(s.c2)
	if err != nil {
		t.Fatal(err)
	}
	if a.disk != disks[0].Path {
		t.Errorf("disk = %s, want %s", a.disk, disks[0].Path)
	}
	if a.ldevid == nil || a.lak == nil {
		t.Fatalf("a provision answered without both certificates: %+v", a)
	}
	ldPub, _ := x509.MarshalPKIXPublicKey(a.ldevid.PublicKey)
	akPub, _ := x509.MarshalPKIXPublicKey(a.lak.PublicKey)
	wantAK, _ := x509.MarshalPKIXPublicKey(s.ak.Public())
	if !bytes.Equal(akPub, wantAK) {
		t.Error("the LAK certificate is not for the AK")
	}
	if bytes.Equal(ldPub, akPub) {
		t.Error("the LDevID certificate is for the AK")
	}
	got := s.v.f.Inv.Get(idNodeA)
	if got.Owned.State != fleet.StateInstalling || got.Owned.LDevIDSerial != hex.EncodeToString(a.ldevid.SerialNumber.Bytes()) ||
		got.Owned.LAKSerial != hex.EncodeToString(a.lak.SerialNumber.Bytes()) || got.Owned.Identity.Empty() {
		t.Errorf("NetBox holds state %q, serials %q %q, identity recorded %v; want installing with the issued serials and the identity",
			got.Owned.State, got.Owned.LDevIDSerial, got.Owned.LAKSerial, !got.Owned.Identity.Empty())
	}
	want := "(Secure Boot " + secureBoot + ")"
	if j := s.v.f.Inv.JournalOf(idNodeA); len(j) == 0 || !strings.Contains(j[len(j)-1], want) {
		t.Errorf("journal %q, want the attestation with %q", j, want)
	}
	return a
}

func hwSerial(t *testing.T, c *x509.Certificate) []byte {
	t.Helper()
	_, hw, _, err := pki.HardwareModuleName(c)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

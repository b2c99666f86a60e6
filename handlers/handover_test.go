package handlers_test

import (
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/pki"
)

// TestRenewalHandoverCloses: a replaced LAK yields one issuance, the renewal's, however often
// it is presented. The node renews once, then keeps its old files (its writes are lost) and
// checks six more times with the replaced LAK and LDevID: each check is accepted and answered
// with the renewal's certificates again — the serials NetBox records — with nothing issued,
// written or journaled (before: 6 checks, 6 issuances, 6 journal entries). The node then installs
// them and presents the new LAK, which ends the handover; the replaced LAK presented after that
// is refused lak_replaced, and nothing is written (docs/enrollment.md, "The handover").
func TestRenewalHandoverCloses(t *testing.T) {
	sim, ch := simulatorBoot(t)
	defer sim.Close()
	n := newRenewalNode(t, ch, nil)
	if err := n.check(nil); err != nil {
		t.Fatalf("first check: exit %d: %v", agent.ExitCode(err), err)
	}
	replaced := n.settled(t, "before the renewal point")
	oldLAK, _ := os.ReadFile(filepath.Join(n.dir, agent.FileLAKCert))

	// The renewal, whose files the node never writes.
	var answered []api.NodeFile
	lost := func(_ string, fs []api.NodeFile) error { answered = fs; return nil }
	n.clock.advance(pastRenewalPoint)
	if err := n.check(lost); err != nil {
		t.Fatalf("the renewing check: exit %d: %v", agent.ExitCode(err), err)
	}
	renewed := n.f.inv.Get(12)
	if renewed.Owned.LAKSerial == replaced.Owned.LAKSerial || renewed.Owned.LAKSerialPrevious != replaced.Owned.LAKSerial ||
		renewed.Owned.LDevIDSerialPrevious != replaced.Owned.LDevIDSerial {
		t.Fatalf("the renewal: NetBox lak_serial %s (previous %s), ldevid previous %s; the node's were %s, %s",
			renewed.Owned.LAKSerial, renewed.Owned.LAKSerialPrevious, renewed.Owned.LDevIDSerialPrevious, replaced.Owned.LAKSerial, replaced.Owned.LDevIDSerial)
	}
	journal := len(n.f.inv.JournalOf(12))

	// ok/handover: six checks with the replaced certificates, each answered with the renewal's.
	for i := 1; i <= 6; i++ {
		answered = nil
		if err := n.check(lost); err != nil {
			t.Fatalf("check %d with the replaced LAK: exit %d: %v", i, agent.ExitCode(err), err)
		}
		if ld, lak := answeredSerials(t, answered); ld != renewed.Owned.LDevIDSerial || lak != renewed.Owned.LAKSerial {
			t.Errorf("check %d with the replaced LAK was answered with LDevID %q and LAK %q, want the renewal's %s and %s",
				i, ld, lak, renewed.Owned.LDevIDSerial, renewed.Owned.LAKSerial)
		}
	}
	d := n.f.inv.Get(12)
	if d.Owned.LAKSerial != renewed.Owned.LAKSerial || d.Owned.LDevIDSerial != renewed.Owned.LDevIDSerial ||
		d.Owned.LAKSerialPrevious != replaced.Owned.LAKSerial {
		t.Errorf("after six checks with the replaced LAK NetBox holds lak_serial %s (previous %s) and ldevid_serial %s: something was issued",
			d.Owned.LAKSerial, d.Owned.LAKSerialPrevious, d.Owned.LDevIDSerial)
	}
	if j := n.f.inv.JournalOf(12); len(j) != journal {
		t.Errorf("six checks with the replaced LAK wrote %d journal entries: %q", len(j)-journal, j[journal:])
	}
	for _, p := range []string{"ldevid", "lak"} {
		if got := renewals(t, n.f.reg, p, "renewed"); got != 1 {
			t.Errorf("fleetd_cert_renewals_total{profile=%q,result=\"renewed\"} = %v, want 1: one issuance, the renewal's", p, got)
		}
		if got := renewals(t, n.f.reg, p, "redelivered"); got != 6 {
			t.Errorf("fleetd_cert_renewals_total{profile=%q,result=\"redelivered\"} = %v, want 6", p, got)
		}
	}

	// ok/handover ends: the node installs the renewal's certificates and presents them.
	if err := n.check(nil); err != nil {
		t.Fatalf("the check that installs the renewal: exit %d: %v", agent.ExitCode(err), err)
	}
	if err := n.check(nil); err != nil {
		t.Fatalf("the check with the renewed certificates: exit %d: %v", agent.ExitCode(err), err)
	}
	settled := n.settled(t, "after the handover")

	// refuse/the replaced LAK after the handover: lak_replaced, nothing written.
	if err := os.WriteFile(filepath.Join(n.dir, agent.FileLAKCert), oldLAK, 0o644); err != nil {
		t.Fatal(err)
	}
	journal = len(n.f.inv.JournalOf(12))
	err := n.check(nil)
	if agent.ExitCode(err) != agent.ExitRefused || err == nil || !strings.Contains(err.Error(), "lak_replaced") {
		t.Errorf("the replaced LAK after the handover: exit %d (%v), want %d lak_replaced", agent.ExitCode(err), err, agent.ExitRefused)
	}
	if d := n.f.inv.Get(12); d.Owned.LastBootCheck != settled.Owned.LastBootCheck || d.Owned.LAKSerial != settled.Owned.LAKSerial || len(n.f.inv.JournalOf(12)) != journal {
		t.Errorf("the refused check wrote to NetBox: last_boot_check %s (was %s), lak_serial %s (was %s)",
			d.Owned.LastBootCheck, settled.Owned.LastBootCheck, d.Owned.LAKSerial, settled.Owned.LAKSerial)
	}
	if got := renewals(t, n.f.reg, "lak", "renewed"); got != 1 {
		t.Errorf("fleetd_cert_renewals_total{profile=\"lak\",result=\"renewed\"} = %v after the refusal, want 1", got)
	}
}

// answeredSerials are the serials of the ldevid.pem and lak.pem a check's answer carried ("" for
// one it did not).
func answeredSerials(t *testing.T, files []api.NodeFile) (ldevid, lak string) {
	t.Helper()
	for _, f := range files {
		certs, err := pki.ParseCertificatesPEM(f.Data)
		if err != nil || len(certs) == 0 {
			t.Fatalf("%s in the answer: %v", f.Name, err)
		}
		s := serialOf(certs[0])
		switch f.Name {
		case agent.FileLDevIDCert:
			ldevid = s
		case agent.FileLAKCert:
			lak = s
		}
	}
	return ldevid, lak
}

func serialOf(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }

package swtpm_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/agent/tpmconn"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
)

// manufacture makes a TPM in a temporary directory, sharing caDir when it is not empty.
func manufacture(t *testing.T, caDir string, banks ...string) *swtpm.TPM {
	t.Helper()
	tpm, err := swtpm.Manufacture(context.Background(), t.TempDir(), swtpm.Options{CADir: caDir, PCRBanks: banks})
	if err != nil {
		t.Fatal(err)
	}
	return tpm
}

func start(t *testing.T, dir string) *swtpm.Instance {
	t.Helper()
	inst, err := swtpm.Start(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop() })
	return inst
}

func openAttest(t *testing.T, inst *swtpm.Instance) *attest.TPM {
	t.Helper()
	ch, err := tpmconn.Open(inst.Spec(), "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	tpm, err := attest.OpenTPM(&attest.OpenConfig{CommandChannel: ch})
	if err != nil {
		t.Fatal(err)
	}
	return tpm
}

// TestManufacture checks that a manufactured TPM looks like a discrete TPM 2.0 to go-attestation:
// the EK certificate in NV 0x01c00002 names the key at 0x81010001, and it chains to the EK CA
// (issuing CA plus root) once the critical SAN is set aside as the TCG EK profile requires.
func TestManufacture(t *testing.T) {
	caDir := t.TempDir()
	m := manufacture(t, caDir)
	inst := start(t, m.Dir)

	tpm := openAttest(t, inst)
	eks, err := tpm.EKs()
	if err != nil {
		t.Fatal(err)
	}
	if len(eks) != 1 || eks[0].Certificate == nil {
		t.Fatalf("EKs() = %+v, want one RSA EK with a certificate", eks)
	}
	_ = tpm.Close() // swtpm serves one connection at a time
	if !bytes.Equal(eks[0].Certificate.Raw, m.EKCert.Raw) {
		t.Error("the certificate in NV 0x01c00002 differs from the one Manufacture wrote")
	}
	spki, _ := x509.MarshalPKIXPublicKey(eks[0].Public)
	if sum := sha256.Sum256(spki); hex.EncodeToString(sum[:]) != m.EKSHA256 {
		t.Errorf("EKSHA256 = %s, want the SHA-256 of the EK's SPKI %x", m.EKSHA256, sum)
	}
	rw, err := inst.Open()
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, err := tpm2.ReadPublic(rw, 0x81010001)
	_ = rw.Close()
	if err != nil {
		t.Fatalf("read the persisted EK at 0x81010001: %v", err)
	}
	key, _ := pub.Key()
	if !m.EKCert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key) {
		t.Error("the key at 0x81010001 is not the key of the EK certificate")
	}

	ca, err := swtpm.ReadEKCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	cert := *m.EKCert
	cert.UnhandledCriticalExtensions = slices.DeleteFunc(slices.Clone(cert.UnhandledCriticalExtensions),
		func(oid asn1.ObjectIdentifier) bool { return oid.Equal(asn1.ObjectIdentifier{2, 5, 29, 17}) })
	opts := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := cert.Verify(opts); err != nil {
		t.Errorf("EK certificate does not chain to the EK CA: %v", err)
	}
	if got := strings.Count(string(ca.BundlePEM()), "BEGIN CERTIFICATE"); got != 2 {
		t.Errorf("BundlePEM holds %d certificates, want the issuing CA and the root", got)
	}
}

// TestSharedCA checks that machines naming the same CA directory share one EK CA and get
// distinct EKs, and that existing state is not overwritten silently.
func TestSharedCA(t *testing.T) {
	caDir := t.TempDir()
	a, b := manufacture(t, caDir), manufacture(t, caDir)
	if a.EKSHA256 == b.EKSHA256 {
		t.Error("two manufactured TPMs have the same EK")
	}
	if !bytes.Equal(a.EKCert.RawIssuer, b.EKCert.RawIssuer) {
		t.Error("EK certificates of machines sharing a CA directory have different issuers")
	}
	if _, err := swtpm.Manufacture(context.Background(), a.Dir, swtpm.Options{CADir: caDir}); err == nil ||
		!strings.Contains(err.Error(), "Overwrite") {
		t.Errorf("manufacturing over an existing TPM: err = %v, want a refusal naming Overwrite", err)
	}
	again, err := swtpm.Manufacture(context.Background(), a.Dir, swtpm.Options{CADir: caDir, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.EKSHA256 == a.EKSHA256 {
		t.Error("Overwrite kept the old EK")
	}
}

// TestReplayEventLog checks that a replayed log verifies against the quoted PCRs, that a restart
// resets the PCRs (a new boot), and that a second bank is replayed too.
func TestReplayEventLog(t *testing.T) {
	m := manufacture(t, "", "sha1", "sha256")
	inst := start(t, m.Dir)
	if err := inst.ReplayEventLog(eventlogs.RHEL8SecureBoot); err != nil {
		t.Fatal(err)
	}
	verifyLog(t, inst, eventlogs.RHEL8SecureBoot, true)
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}

	inst = start(t, m.Dir)
	verifyLog(t, inst, eventlogs.RHEL8SecureBoot, false)
}

// verifyLog quotes every bank with a fresh AK and replays log against the quoted PCRs.
func verifyLog(t *testing.T, inst *swtpm.Instance, log []byte, wantOK bool) {
	t.Helper()
	tpm := openAttest(t, inst)
	defer tpm.Close()
	ak, err := tpm.NewAK(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close(tpm)
	nonce := []byte("fleetd swtpm test nonce 32 bytes")
	pp, err := tpm.AttestPlatform(ak, nonce, &attest.PlatformAttestConfig{EventLog: log})
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.Quotes) != 2 {
		t.Errorf("quotes over %d banks, want 2 (sha1, sha256)", len(pp.Quotes))
	}
	pub, err := attest.ParseAKPublic(pp.Public)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.VerifyAll(pp.Quotes, pp.PCRs, nonce); err != nil {
		t.Fatal(err)
	}
	el, err := attest.ParseEventLog(log)
	if err != nil {
		t.Fatal(err)
	}
	_, err = el.Verify(pp.PCRs)
	if gotOK := err == nil; gotOK != wantOK {
		t.Errorf("event log verification after replay: err = %v, want success %v", err, wantOK)
	}
}

// TestStart checks that Start refuses a directory without a TPM and that Stop ends the process.
func TestStart(t *testing.T) {
	if _, err := swtpm.Start(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "Manufacture") {
		t.Errorf("Start on an empty directory: err = %v, want one that says to run Manufacture", err)
	}
	m := manufacture(t, "")
	inst := start(t, m.Dir)
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	if rw, err := inst.Open(); err == nil {
		_ = rw.Close()
		t.Errorf("swtpm at %s still accepts connections after Stop", inst.Addr())
	}
}

// TestRestartsKeepDA checks that Stop shuts the TPM down in order: a key without noDA stays
// usable across more restarts than the TPM's dictionary-attack threshold would allow after
// unclean shutdowns.
func TestRestartsKeepDA(t *testing.T) {
	m := manufacture(t, "")
	for i := range 8 {
		inst := start(t, m.Dir)
		tpm := openAttest(t, inst)
		ak, err := tpm.NewAK(&attest.AKConfig{Algorithm: attest.ECDSA})
		if err != nil {
			t.Fatal(err)
		}
		// NewKey certifies a key whose authorization is subject to DA protection.
		k, err := tpm.NewKey(ak, &attest.KeyConfig{Algorithm: attest.ECDSA, Size: 256})
		if err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		_ = k.Close()
		_ = ak.Close(tpm)
		_ = tpm.Close()
		if err := inst.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestManufactureCancelled: cancelling a Manufacture at any point ends swtpm_setup and every
// process it started (swtpm, swtpm_localca, certtool): none is left running with the TPM's
// directory on its command line.
func TestManufactureCancelled(t *testing.T) {
	for _, after := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		t.Run("refuse/cancelled-after-"+after.String(), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), after)
			defer cancel()
			if _, err := swtpm.Manufacture(ctx, dir, swtpm.Options{}); err == nil {
				t.Skipf("Manufacture finished within %s; nothing was cancelled", after)
			}
			// SIGKILL is delivered asynchronously: give the killed processes a moment to die.
			left := processesNaming(t, dir)
			for end := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(end); left = processesNaming(t, dir) {
				time.Sleep(50 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("5 s after the cancel, processes still run in %s:\n%s", dir, strings.Join(left, "\n"))
			}
		})
	}
}

// processesNaming lists the live (not zombie) processes whose command line contains s.
func processesNaming(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

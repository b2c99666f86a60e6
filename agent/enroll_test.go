package agent_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/swtpm"
)

// device approves the EK of a TPM in the stub and declares the NVMe disk.
func (s *fleetdStub) approve(name string, ekSHA256 string, secureBoot bool) {
	s.devices[name] = stubDevice{id: int64(len(s.devices) + 1), request: stubRequest, ekHashes: []string{ekSHA256}, diskSerial: nvmeSerial, secureBoot: secureBoot}
}

// TestEnrollSimulator enrolls the go-tpm-tools simulator (Secure Boot log, no EK certificate,
// policy hash) and checks every file against what its reader needs: SPIRE loads the LDevID
// blobs, the boot check reloads the LAK, the certificates chain to fleetd's CAs, the disk is the
// declared one.
func TestEnrollSimulator(t *testing.T) {
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if err := swtpm.ReplayEventLog(sim, eventlogs.RHEL8SecureBoot); err != nil {
		t.Fatal(err)
	}
	ch := channel{ReadWriter: sim, log: eventlogs.RHEL8SecureBoot}
	tpm, err := agent.OpenTPM(ch)
	if err != nil {
		t.Fatal(err)
	}
	ekPub, _, err := tpm.EK()
	if err != nil {
		t.Fatal(err)
	}
	stub, srv := newFleetdStub(t, attest.EKPolicyHash, nil)
	stub.approve("node-a", sha256Hex(ekPub), true)
	sysRoot, devRoot := fakeMachine(t, "2")
	wf := t.TempDir()
	mustWrite(t, filepath.Join(wf, agent.FileDisk), "/dev/disk/by-id/stale\n")

	err = agent.Enroll(context.Background(), agent.EnrollConfig{Conn: agent.Conn{FleetdURL: srv.URL}, Device: "node-a", Request: stubRequest, Channel: ch,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatalf("Enroll: %v (exit %d)", err, agent.ExitCode(err))
	}
	checkFiles(t, stub, wf, devRoot)
	checkSPIRELoads(t, sim, wf)
	checkLAKReloads(t, ch, wf)
}

// TestEnrollSwtpm enrolls a swtpm through the same path as a real machine: the TPM given by
// spec, the event log read from its file, the EK certificate verified under hash+cert.
func TestEnrollSwtpm(t *testing.T) {
	ca, err := swtpm.ReadEKCA(swtpmCADir)
	if err != nil {
		t.Fatal(err)
	}
	stub, srv := newFleetdStub(t, attest.EKPolicyHashCert, ca.BundlePEM())
	stub.approve("node-b", swtpmTPM.EKSHA256, false)
	inst, cfg := swtpmConfig(t, srv.URL, "node-b")
	if err := agent.Enroll(context.Background(), cfg); err != nil {
		t.Fatalf("Enroll: %v (exit %d)", err, agent.ExitCode(err))
	}
	checkFiles(t, stub, cfg.WorkflowDir, cfg.DevRoot)
	rw, err := inst.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	checkSPIRELoads(t, rw, cfg.WorkflowDir)
	checkLAKReloads(t, channel{ReadWriter: rw}, cfg.WorkflowDir)
}

// swtpmConfig starts the package's swtpm with a replayed boot and returns a configuration that
// reaches it the way `fleetd enroll --tpm swtpm:…` does.
func swtpmConfig(t *testing.T, url, device string) (*swtpm.Instance, agent.EnrollConfig) {
	t.Helper()
	inst, err := swtpm.Start(context.Background(), swtpmDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop() })
	if err := inst.ReplayEventLog(eventlogs.Ubuntu2104NoSecureBoot); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "binary_bios_measurements")
	mustWrite(t, logFile, string(eventlogs.Ubuntu2104NoSecureBoot))
	sysRoot, devRoot := fakeMachine(t, "2")
	return inst, agent.EnrollConfig{Conn: agent.Conn{FleetdURL: url, RetryWait: time.Millisecond}, Device: device, Request: stubRequest, TPM: inst.Spec(), EventLog: logFile,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: t.TempDir(),
		Log: zerolog.New(zerolog.NewTestWriter(t))}
}

// checkFiles checks the files' modes, the chains and the disk authorization.
func checkFiles(t *testing.T, stub *fleetdStub, wf, devRoot string) {
	t.Helper()
	modes := map[string]os.FileMode{agent.FileLDevIDCert: 0o644, agent.FileLDevIDPub: 0o644, agent.FileLDevIDPriv: 0o600,
		agent.FileLAKCert: 0o644, agent.FileLAKBlob: 0o600, agent.FileDisk: 0o644}
	for name, want := range modes {
		st, err := os.Stat(filepath.Join(wf, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	if sent := stub.sentLAKBlob(); len(sent) == 0 || !bytes.Equal(readFile(t, wf, agent.FileLAKBlob), sent) {
		t.Errorf("lak.blob differs from the lak_blob sent to fleetd (%d bytes), which fleetd delivers to the node", len(sent))
	}
	if got, want := string(readFile(t, wf, agent.FileDisk)), filepath.Join(devRoot, "disk/by-id", nvmeLink)+"\n"; got != want {
		t.Errorf("disk = %q, want %q", got, want)
	}
	for name, ca := range map[string]interface{ Roots() *x509.CertPool }{agent.FileLDevIDCert: stub.devid, agent.FileLAKCert: stub.lak} {
		leaf := leafOf(t, wf, name)
		if leaf.Subject.SerialNumber != "SN-0042" {
			t.Errorf("%s subject %v does not carry the SMBIOS serial", name, leaf.Subject)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Roots(), Intermediates: intermediates(t, wf, name),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s does not chain to fleetd's CA: %v", name, err)
		}
	}
}

func intermediates(t *testing.T, dir, name string) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(readFile(t, dir, name))
	return p
}

// TestEnrollFailures checks each way an enrollment ends without authorizing a wipe: the exit
// code, how often fleetd was asked, and that no disk file is left.
func TestEnrollFailures(t *testing.T) {
	tests := []struct {
		name         string
		setup        func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig)
		wantExit     int
		wantAttempts map[string]int
		wantErr      string
	}{
		{name: "refuse/ek-not-approved", wantExit: agent.ExitRefused, wantErr: "ek_not_approved",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", strings.Repeat("0", 64), false)
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 1, api.PathAttestEvidence: 0}},
		{name: "refuse/secure-boot-required", wantExit: agent.ExitRefused, wantErr: "secureboot_disabled",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, true)
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 1, api.PathAttestEvidence: 1}},
		{name: "refuse/tpm-1.2", wantExit: agent.ExitRefused, wantErr: "tpm_unsupported",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				cfg.TPM = "" // the machine's own TPM: sysfs says it is a 1.2
				mustWrite(t, filepath.Join(cfg.SysRoot, "class/tpm/tpm0/tpm_version_major"), "1\n")
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 1, api.PathAttestEvidence: 0}},
		{name: "ok/fleetd-unavailable-then-back", wantExit: agent.ExitOK,
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.failNext[api.PathAttestChallenge], s.failNext[api.PathAttestEvidence] = 2, 1
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 3, api.PathAttestEvidence: 2}},
		{name: "fail/fleetd-unavailable", wantExit: agent.ExitFleetd, wantErr: "after 3 attempts",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.failNext[api.PathAttestChallenge] = 100
				cfg.Retries = 2
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 3, api.PathAttestEvidence: 0}},
		{name: "ok/rate-limited-then-served", wantExit: agent.ExitOK,
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.limitNext[api.PathAttestChallenge] = 2
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 3, api.PathAttestEvidence: 1}},
		{name: "fail/rate-limited-throughout", wantExit: agent.ExitFleetd, wantErr: "after 3 attempts: fleetd answered 429",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.limitNext[api.PathAttestChallenge] = 100
				cfg.Retries = 2
			},
			wantAttempts: map[string]int{api.PathAttestChallenge: 3, api.PathAttestEvidence: 0}},
		{name: "fail/fleetd-unreachable", wantExit: agent.ExitFleetd, wantErr: "connection refused",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				cfg.FleetdURL, cfg.Retries = "http://127.0.0.1:1", 1
			}},
		{name: "fail/fleetd-authorizes-an-unreported-disk", wantExit: agent.ExitFleetd, wantErr: "not a disk this machine reported",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.mangle = func(r *api.EvidenceResponse) { r.Disk = "/dev/sda" }
			}},
		{name: "fail/fleetd-certifies-another-key", wantExit: agent.ExitFleetd, wantErr: "not for this machine's key",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) {
				s.approve("node-b", swtpmTPM.EKSHA256, false)
				s.mangle = func(r *api.EvidenceResponse) { r.LDevIDChain = r.LAKChain }
			}},
		{name: "fail/tpm-unreachable", wantExit: agent.ExitTPM, wantErr: "connect to swtpm",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) { cfg.TPM = "swtpm:127.0.0.1:1" }},
		{name: "fail/no-fleetd-url", wantExit: agent.ExitUsage, wantErr: "FLEETD_URL",
			setup: func(t *testing.T, s *fleetdStub, cfg *agent.EnrollConfig) { cfg.FleetdURL = "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub, srv := newFleetdStub(t, attest.EKPolicyHash, nil)
			_, cfg := swtpmConfig(t, srv.URL, "node-b")
			mustWrite(t, filepath.Join(cfg.WorkflowDir, agent.FileDisk), "/dev/disk/by-id/stale\n")
			tc.setup(t, stub, &cfg)
			err := agent.Enroll(context.Background(), cfg)
			if got := agent.ExitCode(err); got != tc.wantExit || (tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Enroll = %v (exit %d), want exit %d with %q", err, got, tc.wantExit, tc.wantErr)
			}
			for path, n := range tc.wantAttempts {
				if got := stub.attempts(path); got != n {
					t.Errorf("%s asked %d times, want %d", path, got, n)
				}
			}
			_, statErr := os.Stat(filepath.Join(cfg.WorkflowDir, agent.FileDisk))
			if wantDisk := tc.wantExit == agent.ExitOK; (statErr == nil) != wantDisk {
				t.Errorf("disk file present = %v, want %v", statErr == nil, wantDisk)
			}
		})
	}
}

// Package swtpm manufactures and runs software TPMs (swtpm) for tests and the development stack.
//
// Each simulated machine's TPM is a TPM 2.0 like a discrete one (docs/design.md §8): an RSA-2048 EK from
// the TCG default template persisted at 0x81010001 with its certificate in NV 0x01c00002, issued
// by a local EK CA (a root and an issuing CA made by swtpm_localca), empty hierarchy passwords,
// an unencrypted state directory, and the sha256 PCR bank (optionally sha1 as well). swtpm runs
// only while a caller needs it (Start/Stop), on free loopback ports.
//
// Everything swtpm_setup and swtpm_localca read or write lives under the directories given
// here: private copies of their configuration are written next to the state, so /etc and
// /var/lib/swtpm-localca are never touched. This package is development code: it is not linked
// into the production binary.
package swtpm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/go-attestation/attest"
)

// Files under a manufactured TPM's directory.
const (
	stateDir       = "state"          // swtpm's state (tpm2-00.permall)
	ekCertFile     = "ek-rsa2048.crt" // the RSA EK certificate as written into NV 0x01c00002
	setupConfFile  = "swtpm_setup.conf"
	localcaConf    = "swtpm-localca.conf"
	localcaOptions = "swtpm-localca.options"
	defaultCADir   = "ekca"
)

// Options tune Manufacture. The zero value makes a sha256-only TPM with its own EK CA.
type Options struct {
	// CADir holds the EK CA's state (root, issuing CA and their keys). Machines that should
	// share one EK CA, as the development stack's do, name the same directory; it is created
	// on first use. Empty means DIR/ekca.
	CADir string
	// PCRBanks are the active PCR banks, "sha256" when empty. {"sha1", "sha256"} imitates
	// hardware with two banks.
	PCRBanks []string
	// Overwrite re-manufactures a directory that already holds a TPM (a new EK, a cleared TPM).
	// Without it, Manufacture refuses to touch existing state.
	Overwrite bool
}

// TPM describes a manufactured software TPM.
type TPM struct {
	Dir string
	// EKCert is the RSA EK certificate stored in NV 0x01c00002.
	EKCert *x509.Certificate
	// EKSHA256 is the lowercase hex SHA-256 of the EK's DER SubjectPublicKeyInfo: the value the
	// owner approves in NetBox's ek_sha256 (docs/design.md §2).
	EKSHA256 string
}

// Manufacture creates a TPM 2.0 state under dir (see the package comment) and returns its EK.
// It runs swtpm_setup, which takes about a second, and swtpm_localca, which creates the EK CA in
// opts.CADir the first time (serialised by swtpm_localca's own lock file there).
func Manufacture(ctx context.Context, dir string, opts Options) (*TPM, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("manufacture swtpm: resolve %s: %w", dir, err)
	}
	caDir := opts.CADir
	if caDir == "" {
		caDir = filepath.Join(dir, defaultCADir)
	}
	if caDir, err = filepath.Abs(caDir); err != nil {
		return nil, fmt.Errorf("manufacture swtpm: resolve %s: %w", opts.CADir, err)
	}
	banks := opts.PCRBanks
	if len(banks) == 0 {
		banks = []string{"sha256"}
	}
	if _, err := os.Stat(filepath.Join(dir, stateDir, "tpm2-00.permall")); err == nil && !opts.Overwrite {
		return nil, fmt.Errorf("manufacture swtpm in %s: a TPM state exists already; set Overwrite to replace it", dir)
	}
	for _, d := range []string{filepath.Join(dir, stateDir), caDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("manufacture swtpm: %w", err)
		}
	}
	if err := writeConfigs(dir, caDir, banks); err != nil {
		return nil, err
	}
	if err := runSetup(ctx, dir, banks, opts.Overwrite); err != nil {
		return nil, err
	}
	return Read(dir)
}

// writeConfigs writes the private swtpm_setup and swtpm_localca configuration.
func writeConfigs(dir, caDir string, banks []string) error {
	files := map[string]string{
		setupConfFile: fmt.Sprintf("create_certs_tool = /usr/bin/swtpm_localca\n"+
			"create_certs_tool_config = %s\ncreate_certs_tool_options = %s\nactive_pcr_banks = %s\n",
			filepath.Join(dir, localcaConf), filepath.Join(dir, localcaOptions), strings.Join(banks, ",")),
		localcaConf: fmt.Sprintf("statedir = %s\nsigningkey = %s\nissuercert = %s\ncertserial = %s\n",
			caDir, filepath.Join(caDir, "signkey.pem"), filepath.Join(caDir, "issuercert.pem"),
			filepath.Join(caDir, "certserial")),
		localcaOptions: "--platform-manufacturer fleetsim\n--platform-version 2.1\n--platform-model swtpm\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("write swtpm configuration: %w", err)
		}
	}
	return nil
}

func runSetup(ctx context.Context, dir string, banks []string, overwrite bool) error {
	args := []string{"--tpm2", "--tpmstate", filepath.Join(dir, stateDir),
		"--create-ek-cert", "--create-platform-cert",
		"--config", filepath.Join(dir, setupConfFile),
		"--write-ek-cert-files", dir,
		"--pcr-banks", strings.Join(banks, ",")}
	if overwrite {
		args = append(args, "--overwrite")
	}
	cmd := exec.CommandContext(ctx, "swtpm_setup", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// swtpm_setup runs swtpm, swtpm_localca and certtool as children. Cancelling ctx must end
	// all of them, not only swtpm_setup (a killed swtpm_setup leaves its swtpm running): they
	// run in a process group of their own, and the cancel kills the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // children a failed run left, if any
		}
		return fmt.Errorf("run swtpm_setup in %s: %w: %s", dir, err, lastLines(out.String(), 5))
	}
	return nil
}

// Read describes a TPM manufactured earlier in dir.
func Read(dir string) (*TPM, error) {
	der, err := os.ReadFile(filepath.Join(dir, ekCertFile))
	if err != nil {
		return nil, fmt.Errorf("read swtpm EK certificate: %w", err)
	}
	cert, err := attest.ParseEKCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse swtpm EK certificate %s: %w", filepath.Join(dir, ekCertFile), err)
	}
	spki, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal swtpm EK public key: %w", err)
	}
	sum := sha256.Sum256(spki)
	return &TPM{Dir: dir, EKCert: cert, EKSHA256: hex.EncodeToString(sum[:])}, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// errNotManufactured is returned by Start for a directory without a TPM state.
var errNotManufactured = errors.New("no TPM state: run Manufacture first")

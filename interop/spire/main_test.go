package spire_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/folly-infra/fleetd/dev/swtpm"
)

// The machine every test and benchmark enrolls: one software TPM, manufactured once per process
// (swtpm_setup takes about a second), with an RSA EK certificate in NV 0x01c00002 issued by a
// local EK CA (a root and the issuing CA below it).
var (
	tpmDir string
	tpm    *swtpm.TPM
	ekCA   *swtpm.EKCA
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "interop-spire-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tpmDir = filepath.Join(dir, "tpm")
	caDir := filepath.Join(dir, "ekca")
	if tpm, err = swtpm.Manufacture(context.Background(), tpmDir, swtpm.Options{CADir: caDir}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if ekCA, err = swtpm.ReadEKCA(caDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

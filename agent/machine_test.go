package agent_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	ga "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/pki"
)

var (
	swtpmDir, swtpmCADir string
	swtpmTPM             *swtpm.TPM
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agent-swtpm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	swtpmDir, swtpmCADir = filepath.Join(dir, "tpm"), filepath.Join(dir, "ekca")
	if swtpmTPM, err = swtpm.Manufacture(context.Background(), swtpmDir, swtpm.Options{CADir: swtpmCADir}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// The fake machine tree: what HookOS shows the agent under /sys and /dev.
const (
	nvmeSerial = "S3Z9NB0K123456"
	nvmeLink   = "nvme-Samsung_SSD_970_EVO_1TB_" + nvmeSerial
	uuid       = "4c4c4544-0042-3510-8051-b4c04f4a3232"
)

// fakeMachine builds a sysfs and devfs tree with two disks, SMBIOS and a TPM of tpmMajor.
func fakeMachine(t *testing.T, tpmMajor string) (sysRoot, devRoot string) {
	t.Helper()
	root := t.TempDir()
	sysRoot, devRoot = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	files := map[string]string{
		"class/dmi/id/product_uuid":        uuid + "\n",
		"class/dmi/id/product_serial":      "SN-0042\n",
		"class/tpm/tpm0/tpm_version_major": tpmMajor + "\n",
		"block/nvme0n1/device/serial":      nvmeSerial + "  \n",
	}
	for name, content := range files {
		mustWrite(t, filepath.Join(sysRoot, name), content)
	}
	links := map[string]string{
		nvmeLink:                            "../../nvme0n1",
		nvmeLink + "-part1":                 "../../nvme0n1p1",
		"nvme-eui.0025385b71b07e2f":         "../../nvme0n1",
		"ata-WDC_WD40EFRX-68N32N0_WD-WCC4N": "../../sda",
	}
	byID := filepath.Join(devRoot, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(byID, name)); err != nil {
			t.Fatal(err)
		}
	}
	return sysRoot, devRoot
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// channel is a command channel with a fixed event log whose Close leaves the TPM open, so a
// test can inspect the TPM after Enroll closed its channel.
type channel struct {
	io.ReadWriter
	log []byte
}

func (c channel) MeasurementLog() ([]byte, error) { return c.log, nil }
func (c channel) Close() error                    { return nil }

// checkSPIRELoads does what SPIRE's tpm_devid agent does with ldevid.pub and ldevid.priv: it
// recreates the ECC SRK from SPIRE's template with a random SRK password, loads the key under it
// and signs a challenge, which must verify with the key of ldevid.pem's leaf.
func checkSPIRELoads(t *testing.T, rw io.ReadWriter, dir string) {
	t.Helper()
	pub, priv := readFile(t, dir, agent.FileLDevIDPub), readFile(t, dir, agent.FileLDevIDPriv)
	srk, _, err := tpm2.CreatePrimary(rw, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "random SRK password", agent.SRKTemplateHighECC())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tpm2.FlushContext(rw, srk); err != nil {
			t.Errorf("flush the SRK: %v", err)
		}
	}()
	h, _, err := tpm2.Load(rw, srk, "random SRK password", pub, priv)
	if err != nil {
		t.Fatalf("load ldevid.pub/ldevid.priv under SPIRE's SRK: %v", err)
	}
	defer func() {
		if err := tpm2.FlushContext(rw, h); err != nil {
			t.Errorf("flush the LDevID key: %v", err)
		}
	}()
	digest := sha256.Sum256([]byte("SPIRE tpm_devid challenge"))
	sig, err := tpm2.Sign(rw, h, "", digest[:], nil, &tpm2.SigScheme{Alg: tpm2.AlgECDSA, Hash: tpm2.AlgSHA256})
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, dir, agent.FileLDevIDCert)
	if !ecdsa.Verify(leaf.PublicKey.(*ecdsa.PublicKey), digest[:], sig.ECC.R, sig.ECC.S) {
		t.Error("the TPM's LDevID signature does not verify with ldevid.pem's key")
	}
}

// checkLAKReloads does what the boot check will do: reload the AK from lak.blob and quote; the
// quote must verify with lak.pem's key.
func checkLAKReloads(t *testing.T, ch ga.CommandChannelTPM20, dir string) {
	t.Helper()
	tpm, err := ga.OpenTPM(&ga.OpenConfig{CommandChannel: ch})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := tpm.LoadAK(readFile(t, dir, agent.FileLAKBlob))
	if err != nil {
		t.Fatalf("reload the AK from lak.blob: %v", err)
	}
	defer ak.Close(tpm)
	nonce := []byte("boot check nonce")
	q, err := ak.Quote(tpm, nonce, ga.HashSHA256)
	if err != nil {
		t.Fatal(err)
	}
	pcrs, err := tpm.PCRs(ga.HashSHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub := ga.AKPublic{Public: leafOf(t, dir, agent.FileLAKCert).PublicKey, Hash: crypto.SHA256}
	if err := pub.Verify(*q, pcrs, nonce); err != nil {
		t.Errorf("a quote by the reloaded AK does not verify with lak.pem's key: %v", err)
	}
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func leafOf(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	certs, err := pki.ParseCertificatesPEM(readFile(t, dir, name))
	if err != nil || len(certs) < 2 {
		t.Fatalf("%s: %d certificates, %v; want the leaf and its chain", name, len(certs), err)
	}
	return certs[0]
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("%x", s[:])
}

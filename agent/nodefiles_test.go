package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
)

// TestInstallNodeFiles installs into a missing directory and over existing files: each file has
// exactly its bytes and mode (a blob that was 0644 becomes 0600), and no temporary file is left.
func TestInstallNodeFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var/lib/fleetd-node")
	first := []api.NodeFile{
		{Name: agent.FileLDevIDPriv, Mode: 0o644, Data: []byte{0x00, 0x20, 0xff, 0x01}},
		{Name: agent.FileLDevIDCert, Mode: 0o644, Data: []byte("-----BEGIN CERTIFICATE-----\nold\n")},
	}
	if err := agent.InstallNodeFiles(dir, first); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("the node directory: %v, %v; want created 0755", st, err)
	}
	second := []api.NodeFile{
		{Name: agent.FileLDevIDPriv, Mode: 0o600, Data: []byte{0x00, 0x20, 0xfe}},
		{Name: agent.FileLDevIDPub, Mode: 0o600, Data: []byte{0x00, 0x23, 0x00, 0x0b}},
		{Name: agent.FileLDevIDCert, Mode: 0o644, Data: []byte("-----BEGIN CERTIFICATE-----\nnew\n")},
	}
	if err := agent.InstallNodeFiles(dir, second); err != nil {
		t.Fatal(err)
	}
	for _, f := range second {
		checkNodeFile(t, dir, f)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(second) {
		t.Errorf("the node directory holds %d entries, want the %d files and no temporary file: %v", len(entries), len(second), entries)
	}
}

// TestInstallNodeFilesRefuses: each bad set is refused with an error naming the file, and
// nothing of it is written, not even its good files.
func TestInstallNodeFilesRefuses(t *testing.T) {
	good := api.NodeFile{Name: agent.FileLDevIDPub, Mode: 0o600, Data: []byte("new")}
	for _, tc := range []struct {
		name string
		bad  api.NodeFile
		want string
	}{
		{"refuse/path", api.NodeFile{Name: "../lak.pem", Mode: 0o644, Data: []byte("x")}, `"../lak.pem" is not a plain file name`},
		{"refuse/hidden", api.NodeFile{Name: ".ldevid.pem.123", Mode: 0o644, Data: []byte("x")}, "is not a plain file name"},
		{"refuse/empty-name", api.NodeFile{Mode: 0o644, Data: []byte("x")}, `"" is not a plain file name`},
		{"refuse/twice", api.NodeFile{Name: agent.FileLDevIDPub, Mode: 0o600, Data: []byte("x")}, "ldevid.pub is given twice"},
		{"refuse/setuid", api.NodeFile{Name: agent.FileLDevIDCert, Mode: fs.ModeSetuid | 0o755, Data: []byte("x")}, "ldevid.pem has mode"},
		{"refuse/no-bytes", api.NodeFile{Name: agent.FileLDevIDCert, Mode: 0o644}, "ldevid.pem is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			old := api.NodeFile{Name: agent.FileLDevIDPub, Mode: 0o600, Data: []byte("old")}
			if err := os.WriteFile(filepath.Join(dir, old.Name), old.Data, old.Mode); err != nil {
				t.Fatal(err)
			}
			err := agent.InstallNodeFiles(dir, []api.NodeFile{good, tc.bad})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InstallNodeFiles: %v, want an error with %q", err, tc.want)
			}
			checkNodeFile(t, dir, old)
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("a refused set wrote into the directory: %v", entries)
			}
		})
	}
}

func checkNodeFile(t *testing.T, dir string, want api.NodeFile) {
	t.Helper()
	p := filepath.Join(dir, want.Name)
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Data) {
		t.Errorf("%s holds %q, want %q", want.Name, got, want.Data)
	}
	if st, _ := os.Stat(p); st.Mode() != want.Mode {
		t.Errorf("%s has mode %v, want %v", want.Name, st.Mode(), want.Mode)
	}
}

// TestInstallDelivered is a Talos node's boot: the text forms its machine config wrote become the
// files SPIRE reads, byte for byte and with the text form's mode; a file the node already holds
// (renewed since) stays; a second boot installs nothing; `fleetd boot-check --install-only`
// needs no fleetd URL and no TPM.
func TestInstallDelivered(t *testing.T) {
	dir := t.TempDir()
	pub, priv := []byte{0x00, 0x23, 0x00, 0x0b, 0xff}, []byte{0x00, 0x20, 0x80, 0x00}
	renewed := []byte("-----BEGIN CERTIFICATE-----\nrenewed\n")
	writeTextForm(t, dir, agent.FileLDevIDPub, pub, 0o600)
	writeTextForm(t, dir, agent.FileLDevIDPriv, priv, 0o600)
	writeTextForm(t, dir, agent.FileLDevIDCert, []byte("-----BEGIN CERTIFICATE-----\ndelivered\n"), 0o644)
	lak := []byte("-----BEGIN CERTIFICATE-----\nlak\n")
	writeTextForm(t, dir, agent.FileLAKCert, lak, 0o644)
	if err := os.WriteFile(filepath.Join(dir, agent.FileLDevIDCert), renewed, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := agent.ParseBootCheckArgs([]string{"--install-only", "--dir", dir}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.BootCheck(context.Background(), cfg); err != nil {
		t.Fatalf("boot-check --install-only: %v (exit %d)", err, agent.ExitCode(err))
	}
	checkNodeFile(t, dir, api.NodeFile{Name: agent.FileLDevIDPub, Mode: 0o600, Data: pub})
	checkNodeFile(t, dir, api.NodeFile{Name: agent.FileLDevIDPriv, Mode: 0o600, Data: priv})
	checkNodeFile(t, dir, api.NodeFile{Name: agent.FileLDevIDCert, Mode: 0o644, Data: renewed})
	checkNodeFile(t, dir, api.NodeFile{Name: agent.FileLAKCert, Mode: 0o644, Data: lak})
	// A renewal replaced lak.pem; the next boot rewrites its text form from the config and must
	// not put the enrollment's LAK back (the node would present a LAK fleetd no longer accepts).
	renewedLAK := []byte("-----BEGIN CERTIFICATE-----\nrenewed lak\n")
	if err := agent.InstallNodeFiles(dir, []api.NodeFile{{Name: agent.FileLAKCert, Mode: 0o644, Data: renewedLAK}}); err != nil {
		t.Fatal(err)
	}
	writeTextForm(t, dir, agent.FileLAKCert, lak, 0o644)
	if got, err := agent.InstallDelivered(dir); err != nil || len(got) != 0 {
		t.Errorf("a second boot installed %v (%v), want nothing", got, err)
	}
	checkNodeFile(t, dir, api.NodeFile{Name: agent.FileLAKCert, Mode: 0o644, Data: renewedLAK})
	empty := filepath.Join(t.TempDir(), "none")
	if got, err := agent.InstallDelivered(empty); err != nil || len(got) != 0 {
		t.Errorf("a node without text forms: installed %v (%v), want nothing", got, err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Error("a node without text forms got its node directory created")
	}
}

// TestInstallDeliveredRefuses: a damaged text form is an error naming it (a local failure, exit
// 1, before any check), and none of the files is installed.
func TestInstallDeliveredRefuses(t *testing.T) {
	dir := t.TempDir()
	writeTextForm(t, dir, agent.FileLDevIDPub, []byte{1, 2, 3}, 0o600)
	if err := os.WriteFile(filepath.Join(dir, agent.FileLDevIDPriv+agent.TextFormSuffix), []byte("not base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := agent.BootCheck(context.Background(), agent.BootCheckConfig{Dir: dir, InstallOnly: true})
	if err == nil || !strings.Contains(err.Error(), "ldevid.priv.b64 is not base64") || agent.ExitCode(err) != agent.ExitFailure {
		t.Fatalf("boot-check: %v (exit %d), want a local failure naming ldevid.priv.b64", err, agent.ExitCode(err))
	}
	for _, name := range []string{agent.FileLDevIDPub, agent.FileLDevIDPriv, agent.FileLDevIDCert} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s was installed from a damaged set", name)
		}
	}
}

func writeTextForm(t *testing.T, dir, name string, data []byte, mode os.FileMode) {
	t.Helper()
	text := base64.StdEncoding.EncodeToString(data) + "\n"
	if err := os.WriteFile(filepath.Join(dir, name+agent.TextFormSuffix), []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

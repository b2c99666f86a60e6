package tpmconn

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve accepts one connection, reads a command, and writes resp in the given pieces.
func serve(t *testing.T, pieces ...[]byte) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Read(make([]byte, 64))
		for _, p := range pieces {
			_, _ = c.Write(p)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return l.Addr().String()
}

func response(size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint16(b, 0x8001)
	binary.BigEndian.PutUint32(b[2:], uint32(size))
	for i := 10; i < size; i++ {
		b[i] = byte(i)
	}
	return b
}

// TestFramedConn checks that one Read returns one whole response even when it arrives in pieces,
// and that a response with an impossible size is refused.
func TestFramedConn(t *testing.T) {
	resp := response(300)
	rw, err := DialSwtpm(serve(t, resp[:4], resp[4:100], resp[100:]))
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.Write([]byte{0x80, 0x01, 0, 0, 0, 10, 0, 0, 1, 0x44}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := rw.Read(buf)
	if err != nil || n != 300 || string(buf[:n]) != string(resp) {
		t.Fatalf("Read = %d bytes, %v; want the whole 300-byte response in one Read", n, err)
	}

	bad := response(10)
	binary.BigEndian.PutUint32(bad[2:], 4)
	rw2, err := DialSwtpm(serve(t, bad))
	if err != nil {
		t.Fatal(err)
	}
	defer rw2.Close()
	_, _ = rw2.Write([]byte{0})
	if _, err := rw2.Read(buf); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Read of a 4-byte response: err = %v, want out of range", err)
	}
}

// TestDetectVersion checks the version rule on sysfs trees of a TPM 2.0, a TPM 1.2 on an old
// kernel (caps, no tpm_version_major), and no TPM.
func TestDetectVersion(t *testing.T) {
	root := t.TempDir()
	write := func(dir, name, content string) string {
		p := filepath.Join(root, dir, "tpm0", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, dir)
	}
	v2 := write("v2", "tpm_version_major", "2\n")
	v12 := write("v12", "caps", "Manufacturer: 0x49465800\n")
	tests := []struct {
		name, spec, sys string
		want            Version
	}{
		{"ok/swtpm", "swtpm:127.0.0.1:2321", "", Version20},
		{"ok/tpm2-by-sysfs", "/dev/tpmrm0", v2, Version20},
		{"ok/tpm12-by-caps", "", v12, Version12},
		{"ok/no-tpm", "/nonexistent/tpmrm0", filepath.Join(root, "none"), VersionUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DetectVersion(tc.spec, tc.sys); got != tc.want {
				t.Errorf("DetectVersion(%q) = %q, want %q", tc.spec, got, tc.want)
			}
		})
	}
}

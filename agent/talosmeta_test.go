package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/dev/fakehw"
)

// talosLayout is a Talos metal image's partitions (META is the fourth).
func talosLayout(sector int64) []fakehw.Partition { return fakehw.TalosImage(sector) }

// gptDisk writes a 16 MiB GPT disk image listing parts, and returns its path.
func gptDisk(t *testing.T, sector int64, parts []fakehw.Partition) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := fakehw.WriteGPT(path, fakehw.TalosImageSize, sector, parts); err != nil {
		t.Fatal(err)
	}
	return path
}

// metaAt is the byte offset of the META partition of talosLayout.
func metaAt(sector int64) int64 { return talosLayout(sector)[3].First * sector }

// writeAt changes bytes of the image at path.
func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func writeCode(t *testing.T, path, code string) (TalosCodeResult, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return WriteTalosCode(f, code)
}

// readMeta decodes both copies of META at off with fleetd's reader; each must check.
func readMeta(t *testing.T, path string, off int64) talosADV {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var first talosADV
	for i := range 2 {
		a, err := unmarshalTalosADV(b[off+int64(i)*talosADVLength : off+int64(i+1)*talosADVLength])
		if err != nil {
			t.Fatalf("META copy %d: %v", i+1, err)
		}
		if i == 0 {
			first = a
		} else if !equalADV(first, a) {
			t.Fatalf("the two copies differ: %v and %v", first, a)
		}
	}
	return first
}

func equalADV(a, b talosADV) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].tag != b[i].tag || !bytes.Equal(a[i].value, b[i].value) {
			return false
		}
	}
	return true
}

const testSecret = "q3Jb7m0c1l5bT0VJm3Jd0dN9lJ2o0Qn4m1Zr8cYkE2U"

// TestWriteTalosCode: the fetch secret lands in META's DownloadURLCode, in both copies, over a
// zeroed META (as a Talos disk image leaves it) or one with keys, which are kept in their order;
// an older code is replaced. A disk that is not a Talos disk image, or whose META or partition
// table does not check, is refused with an error that names what is wrong, and not one byte of
// the disk changes.
func TestWriteTalosCode(t *testing.T) {
	seeded := talosADV{{0x0a, []byte(`{"addresses":[]}`)}, {TalosDownloadCode, []byte("typed-on-the-console")}, {0x0c, []byte("user")}}
	seedBlock, err := seeded.marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		sector int64
		parts  []fakehw.Partition
		meta   []byte // written twice at META's start; nil leaves it zeroed
		change func(t *testing.T, path string)
		want   talosADV // the keys after the write
		kept   int
		empty  bool
		err    string // a refusal names this
	}{
		{name: "ok/zeroed-meta", sector: 512, parts: talosLayout(512),
			want: talosADV{{TalosDownloadCode, []byte(testSecret)}}, empty: true},
		{name: "ok/4096-byte-sectors", sector: 4096, parts: talosLayout(4096),
			want: talosADV{{TalosDownloadCode, []byte(testSecret)}}, empty: true},
		{name: "ok/keys-kept-code-replaced", sector: 512, parts: talosLayout(512), meta: seedBlock,
			want: talosADV{seeded[0], seeded[2], {TalosDownloadCode, []byte(testSecret)}}, kept: 2},
		{name: "refuse/no-gpt", sector: 512, parts: talosLayout(512),
			change: func(t *testing.T, p string) { writeAt(t, p, 512, make([]byte, 512)) }, err: "has no GPT"},
		{name: "refuse/no-meta-partition", sector: 512, parts: talosLayout(512)[:3], err: "has no partition named META"},
		{name: "refuse/two-meta-partitions", sector: 512, parts: append(talosLayout(512), fakehw.Partition{Name: "META", First: 12 << 11, Last: 13<<11 - 1}),
			err: "has 2 partitions named META (4, 6); refusing to choose"},
		{name: "refuse/meta-of-another-size", sector: 512, parts: []fakehw.Partition{{Name: "META", First: 2048, Last: 3 << 11}},
			err: "partition 1 is named META but is 2097664 bytes"},
		// An LBA whose byte offset does not fit in an int64: 2^55 sectors of 512 bytes are 2^64
		// bytes, so a multiplication that wrapped would put this META at 4 MiB, inside BIOS.
		{name: "refuse/meta-past-what-a-disk-addresses", sector: 512,
			parts: append(talosLayout(512)[:3], fakehw.Partition{Name: "META", First: 1<<55 + 4<<11, Last: 1<<55 + 5<<11 - 1}),
			err:   "partition 4 (META) lies past LBA"},
		{name: "refuse/gpt-header-crc", sector: 512, parts: talosLayout(512),
			change: func(t *testing.T, p string) { writeAt(t, p, 512+40, []byte{0x99}) }, err: "GPT header's CRC32 does not match"},
		{name: "refuse/gpt-entries-crc", sector: 512, parts: talosLayout(512),
			change: func(t *testing.T, p string) { writeAt(t, p, 1024+3*128+56, []byte{'X'}) }, err: "GPT entries' CRC32 does not match"},
		{name: "refuse/garbage-meta", sector: 512, parts: talosLayout(512),
			change: func(t *testing.T, p string) { writeAt(t, p, metaAt(512)+100, []byte("x")) },
			err:    "META (partition 4) is damaged: copy 1: begins with 0x00000000"},
		{name: "refuse/copy-1-damaged", sector: 512, parts: talosLayout(512), meta: seedBlock,
			change: func(t *testing.T, p string) { writeAt(t, p, metaAt(512)+10, []byte{0xff}) },
			err:    "is damaged: copy 1: its SHA-256 checksum does not match its content (copy 2 checks)"},
		{name: "refuse/copy-2-damaged", sector: 512, parts: talosLayout(512), meta: seedBlock,
			change: func(t *testing.T, p string) { writeAt(t, p, metaAt(512)+2*talosADVLength-4, []byte{0}) },
			err:    "is damaged: copy 2: ends with 0x00b4c3d2"},
		{name: "refuse/value-past-the-end", sector: 512, parts: talosLayout(512), meta: func() []byte {
			b, _ := talosADV{{0x0c, []byte("v")}}.marshal()
			binary.BigEndian.PutUint32(b[8:], talosADVLength)
			copy(b[len(b)-talosADVTrailer:], talosADVChecksum(b))
			return b
		}(), err: "key 0xc's value of 262144 bytes runs past the copy's end"},
		{name: "refuse/no-room", sector: 512, parts: talosLayout(512), meta: func() []byte {
			b, _ := talosADV{{0x0c, make([]byte, talosADVLength-4-talosADVTrailer-8-20)}}.marshal()
			return b
		}(), err: "its keys do not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := gptDisk(t, tc.sector, tc.parts)
			off := tc.parts[len(tc.parts)-1].First * tc.sector
			if len(tc.parts) >= 4 {
				off = tc.parts[3].First * tc.sector
			}
			if tc.meta != nil {
				writeAt(t, path, off, append(bytes.Clone(tc.meta), tc.meta...))
			}
			if tc.change != nil {
				tc.change(t, path)
			}
			before := fileSum(t, path)
			res, err := writeCode(t, path, testSecret)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				if fileSum(t, path) != before {
					t.Error("the refused disk was changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Partition != 4 || len(res.Kept) != tc.kept || res.WasEmpty != tc.empty {
				t.Errorf("result = %+v, want partition 4, %d kept, empty %v", res, tc.kept, tc.empty)
			}
			if got := readMeta(t, path, off); !equalADV(got, tc.want) {
				t.Errorf("META = %v, want %v", got, tc.want)
			}
		})
	}
}

// talosMetaTool is Talos v1.11.5's own META reader, built by scripts/tools.sh (make tools).
func talosMetaTool(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "scripts", "tools.sh"), "path", "talos-meta").Output()
	if err != nil {
		t.Fatalf("Talos's META reader is not built (run make tools): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// talosRead is what Talos's reader reports of a disk image's META.
type talosRead struct {
	Offset  int64             `json:"offset"`
	Tags    map[string]string `json:"tags"`
	Copy1OK bool              `json:"copy1_ok"`
	Copy2OK bool              `json:"copy2_ok"`
	Copy1   string            `json:"copy1_error"`
	CodeTag int               `json:"download_url_code_tag"`
}

func runTalosMeta(t *testing.T, tool, path string, sets ...string) talosRead {
	t.Helper()
	cmd := exec.Command(tool, append([]string{path}, sets...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("talos-meta %s %v: %v: %s", path, sets, err, stderr.String())
	}
	var r talosRead
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("talos-meta's report %q: %v", out, err)
	}
	return r
}

// TestTalosReadsTheCode holds fleetd's META writer against Talos's own reader (Talos v1.11.5's
// ADV code and its volume probe, scripts/tools.sh's talos-meta): on a disk image whose META a
// Talos image left zeroed, or where Talos's own writer put keys (as its installer does), Talos
// finds the partition, both copies check, DownloadURLCode (the key Talos's machinery names, the
// one fleetd writes) holds the fetch secret, and every other key is as Talos wrote it. Where
// fleetd refuses a META copy as damaged, Talos's reader finds the same copy bad.
func TestTalosReadsTheCode(t *testing.T) {
	tool := talosMetaTool(t)
	t.Run("ok/zeroed-meta", func(t *testing.T) {
		path := gptDisk(t, 512, talosLayout(512))
		r := runTalosMeta(t, tool, path)
		if r.Offset != metaAt(512) || len(r.Tags) != 0 {
			t.Fatalf("Talos reads %+v of the fresh image, want META at %d with no keys", r, metaAt(512))
		}
		if r.CodeTag != TalosDownloadCode {
			t.Fatalf("Talos's DownloadURLCode is tag %d, fleetd writes %d", r.CodeTag, TalosDownloadCode)
		}
		if _, err := writeCode(t, path, testSecret); err != nil {
			t.Fatal(err)
		}
		r = runTalosMeta(t, tool, path)
		if !r.Copy1OK || !r.Copy2OK || len(r.Tags) != 1 || r.Tags["11"] != testSecret {
			t.Errorf("Talos reads %+v, want both copies checking and only DownloadURLCode, the secret", r)
		}
	})
	t.Run("ok/keys-Talos-wrote", func(t *testing.T) {
		path := gptDisk(t, 512, talosLayout(512))
		network := `{"addresses":[{"address":"192.0.2.10/24"}]}`
		runTalosMeta(t, tool, path, "10="+network, "11=typed-on-the-console", "12=user value", "15=token")
		if _, err := writeCode(t, path, testSecret); err != nil {
			t.Fatal(err)
		}
		r := runTalosMeta(t, tool, path)
		want := map[string]string{"10": network, "11": testSecret, "12": "user value", "15": "token"}
		if !r.Copy1OK || !r.Copy2OK || len(r.Tags) != len(want) {
			t.Fatalf("Talos reads %+v, want both copies checking and the keys %v", r, want)
		}
		for k, v := range want {
			if r.Tags[k] != v {
				t.Errorf("tag %s = %q, want %q", k, r.Tags[k], v)
			}
		}
	})
	t.Run("refuse/copy-1-damaged", func(t *testing.T) {
		path := gptDisk(t, 512, talosLayout(512))
		runTalosMeta(t, tool, path, "12=user value")
		writeAt(t, path, metaAt(512)+10, []byte{0xff})
		before := fileSum(t, path)
		if _, err := writeCode(t, path, testSecret); err == nil || !strings.Contains(err.Error(), "copy 1: its SHA-256 checksum does not match") {
			t.Fatalf("err = %v, want copy 1 refused", err)
		}
		if fileSum(t, path) != before {
			t.Error("the refused disk was changed")
		}
		if r := runTalosMeta(t, tool, path); r.Copy1OK || !strings.Contains(r.Copy1, "checksum mismatch") {
			t.Errorf("Talos reads copy 1 as %+v, want its checksum refused too", r)
		}
	})
}

// TestTalosMetaStep runs `fleetd talos-meta` as the Template's step runs it: the disk from the
// shared directory's disk file (the by-id path enroll resolved), the secret from its
// fetch-secret file, which is removed once META holds it; the log names the disk and never the
// secret. Without the secret or the disk nothing is written and the secret stays.
func TestTalosMetaStep(t *testing.T) {
	setup := func(t *testing.T) (cfg TalosMetaConfig, disk string, log *bytes.Buffer) {
		dev, wf := t.TempDir(), t.TempDir()
		img := gptDisk(t, 512, talosLayout(512))
		disk = filepath.Join(dev, "sda")
		if err := os.Rename(img, disk); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dev, "disk", "by-id"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../sda", filepath.Join(dev, "disk", "by-id", "ata-DISK_S1")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wf, FileDisk), []byte(filepath.Join(dev, "disk", "by-id", "ata-DISK_S1")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wf, FileFetchSecret), []byte(testSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		log = &bytes.Buffer{}
		return TalosMetaConfig{WorkflowDir: wf, Log: zerolog.New(log)}, disk, log
	}
	t.Run("ok/written", func(t *testing.T) {
		cfg, disk, log := setup(t)
		if err := TalosMeta(cfg); err != nil {
			t.Fatal(err)
		}
		if v, ok := readMeta(t, disk, metaAt(512)).get(TalosDownloadCode); !ok || string(v) != testSecret {
			t.Errorf("DownloadURLCode = %q, want the secret", v)
		}
		if _, err := os.Stat(filepath.Join(cfg.WorkflowDir, FileFetchSecret)); !os.IsNotExist(err) {
			t.Errorf("the fetch secret is still in the shared directory (%v)", err)
		}
		if !strings.Contains(log.String(), "ata-DISK_S1") || strings.Contains(log.String(), testSecret) {
			t.Errorf("log = %s, want the disk named and the secret not", log)
		}
	})
	for _, tc := range []struct {
		name, remove, err string
	}{
		{"refuse/no-fetch-secret", FileFetchSecret, "fleetd enroll was handed no fetch secret"},
		{"refuse/no-authorized-disk", FileDisk, "fleetd enroll authorized no disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, disk, _ := setup(t)
			if err := os.Remove(filepath.Join(cfg.WorkflowDir, tc.remove)); err != nil {
				t.Fatal(err)
			}
			before := fileSum(t, disk)
			if err := TalosMeta(cfg); err == nil || !strings.Contains(err.Error(), tc.err) || ExitCode(err) != ExitFailure {
				t.Fatalf("err = %v (exit %d), want %q, exit %d", err, ExitCode(err), tc.err, ExitFailure)
			}
			if fileSum(t, disk) != before {
				t.Error("the disk was changed")
			}
			if tc.remove != FileFetchSecret {
				if _, err := os.Stat(filepath.Join(cfg.WorkflowDir, FileFetchSecret)); err != nil {
					t.Errorf("the fetch secret is gone after a refusal: %v", err)
				}
			}
		})
	}
}

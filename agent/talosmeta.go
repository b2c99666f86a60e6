package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf16"

	"github.com/rs/zerolog"
)

// `fleetd talos-meta` is a Talos provision's step after the image write (docs/security.md, "The
// configuration fetch"): it puts the one-time fetch secret `fleetd enroll` wrote into the
// Workflow's shared directory into the written disk's META partition, as the value of the key
// Talos names DownloadURLCode. At its first boot Talos loads META before it fetches its machine
// config, and fills the `${code}` of its talos.config= URL from that key; fleetd serves a Talos
// configuration only to a fetch whose code is the secret.
//
// META is Talos's own format, written here from its description, not from Talos's code:
//   - the partition is the disk's GPT partition named META, of 1 MiB (Talos finds it by that
//     name and size);
//   - it begins with two copies of the same 256 KiB block; Talos loads the first copy that
//     checks, else the second;
//   - a block is, in big-endian: magic 0x5a4b3c2d, then entries (a 4-byte tag, a 4-byte length,
//     the value) up to a zero tag or the end of the entries' room, then the SHA-256 of the whole
//     block computed with its own 32 bytes zeroed, then magic 0xa5b4c3d2 in the last 4 bytes;
//   - a freshly built Talos disk image leaves META zeroed (no keys);
//   - the end of the partition holds an older, smaller format (syslinux's ADV) that Talos reads
//     too; this step does not touch it.
const (
	TalosMetaLabel    = "META"
	TalosMetaSize     = 1 << 20    // the only size of partition Talos reads META from
	talosADVLength    = 256 * 1024 // one copy
	talosADVMagic1    = 0x5a4b3c2d
	talosADVMagic2    = 0xa5b4c3d2
	talosADVTrailer   = 32 + 4 // the checksum and magic2
	talosADVEndTag    = 0
	TalosDownloadCode = 0x0b // DownloadURLCode: the value of ${code} in the talos.config= URL
)

// TalosMetaConfig is what `fleetd talos-meta` needs. Zero values take the defaults documented on
// each field, which are what a HookOS Workflow action has.
type TalosMetaConfig struct {
	WorkflowDir string // "" is /workflow (FLEETD_WORKFLOW_DIR): the disk and the fetch secret
	Log         zerolog.Logger
}

// ParseTalosMetaArgs reads `fleetd talos-meta`'s flags, each defaulting to its environment
// variable, as ParseEnrollArgs does. Errors are *UsageError.
func ParseTalosMetaArgs(args []string, getenv func(string) string, stderr io.Writer) (TalosMetaConfig, error) {
	var c TalosMetaConfig
	fs := flag.NewFlagSet("fleetd talos-meta", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.WorkflowDir, "workflow-dir", getenv("FLEETD_WORKFLOW_DIR"), "where fleetd enroll wrote the disk it authorized and the fetch secret, /workflow when empty (FLEETD_WORKFLOW_DIR)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return c, &UsageError{Msg: fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	return c, nil
}

// TalosMeta runs `fleetd talos-meta`: it reads the disk `fleetd enroll` authorized (its by-id
// path, under the devfs enroll ran with) and the fetch
// secret it was handed from the Workflow's shared directory, sets DownloadURLCode in the disk's
// META to the secret, keeping every other key, writes both copies, reads them back, and removes
// the secret from the shared directory. A missing file, a disk without Talos's META partition, or
// a META that does not check is refused before anything is written (exit 1).
func TalosMeta(cfg TalosMetaConfig) error {
	if cfg.WorkflowDir == "" {
		cfg.WorkflowDir = "/workflow"
	}
	diskPath, err := readLine(filepath.Join(cfg.WorkflowDir, FileDisk))
	if err != nil {
		return fmt.Errorf("%w: fleetd enroll authorized no disk in this Workflow; nothing written", err)
	}
	secretFile := filepath.Join(cfg.WorkflowDir, FileFetchSecret)
	secret, err := readLine(secretFile)
	if err != nil {
		return fmt.Errorf("%w: fleetd enroll was handed no fetch secret (is the device's class a Talos class, and does every action share the request's directory?); fleetd serves a Talos configuration only with it; nothing written", err)
	}
	f, err := os.OpenFile(diskPath, os.O_RDWR, 0) // the by-id path enroll resolved under its devfs
	if err != nil {
		return fmt.Errorf("open the authorized disk %s: %w", diskPath, err)
	}
	defer f.Close()
	res, err := WriteTalosCode(f, secret)
	if err != nil {
		return fmt.Errorf("%s: %w", diskPath, err)
	}
	if err := os.Remove(secretFile); err != nil {
		return fmt.Errorf("remove the fetch secret from the shared directory: %w", err)
	}
	cfg.Log.Info().Str("step", "talos-meta").Str("disk", diskPath).Int("partition", res.Partition).
		Int("kept_keys", len(res.Kept)).Bool("was_empty", res.WasEmpty).
		Msg("wrote the fetch secret into the disk's META as DownloadURLCode, for Talos's ${code}")
	return nil
}

func readLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return line, nil
}

// TalosCodeResult is what WriteTalosCode did.
type TalosCodeResult struct {
	Partition int      // the META partition's number (1-based)
	Kept      []uint32 // the other keys, kept as they were
	WasEmpty  bool     // META held no keys (a freshly written image)
}

// disk is what WriteTalosCode needs of a disk: a block device, or an image file in tests.
type disk interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// WriteTalosCode sets DownloadURLCode to code in the META partition of the GPT disk d, keeping
// every other key, and writes both copies; it then reads both back. Nothing is written when the
// disk has no GPT, no partition named META or several, one of another size, or a META whose
// copies do not check (unless both are zeroed, as an image leaves them).
func WriteTalosCode(d disk, code string) (TalosCodeResult, error) {
	if code == "" || len(code) > 1024 {
		return TalosCodeResult{}, fmt.Errorf("the fetch secret is %d bytes: not one fleetd hands out", len(code))
	}
	part, err := findGPTPartition(d, TalosMetaLabel)
	if err != nil {
		return TalosCodeResult{}, err
	}
	if part.size != TalosMetaSize {
		return TalosCodeResult{}, fmt.Errorf("partition %d is named %s but is %d bytes; Talos reads META only from a %d-byte partition: is the written image a Talos disk image?", part.number, TalosMetaLabel, part.size, TalosMetaSize)
	}
	raw := make([]byte, 2*talosADVLength)
	if _, err := d.ReadAt(raw, part.offset); err != nil {
		return TalosCodeResult{}, fmt.Errorf("read META (partition %d): %w", part.number, err)
	}
	adv, empty, err := decodeTalosMeta(raw)
	if err != nil {
		return TalosCodeResult{}, fmt.Errorf("META (partition %d) %w; nothing written: write the image again", part.number, err)
	}
	res := TalosCodeResult{Partition: part.number, WasEmpty: empty}
	for _, e := range adv {
		if e.tag != TalosDownloadCode {
			res.Kept = append(res.Kept, e.tag)
		}
	}
	adv = adv.with(TalosDownloadCode, []byte(code))
	block, err := adv.marshal()
	if err != nil {
		return TalosCodeResult{}, fmt.Errorf("META (partition %d): %w; nothing written", part.number, err)
	}
	for i := range 2 {
		if _, err := d.WriteAt(block, part.offset+int64(i*talosADVLength)); err != nil {
			return TalosCodeResult{}, fmt.Errorf("write META copy %d (partition %d): %w", i+1, part.number, err)
		}
	}
	if err := d.Sync(); err != nil {
		return TalosCodeResult{}, fmt.Errorf("sync META (partition %d): %w", part.number, err)
	}
	if _, err := d.ReadAt(raw, part.offset); err != nil {
		return TalosCodeResult{}, fmt.Errorf("read META back (partition %d): %w", part.number, err)
	}
	for i := range 2 {
		back, err := unmarshalTalosADV(raw[i*talosADVLength : (i+1)*talosADVLength])
		if err != nil {
			return TalosCodeResult{}, fmt.Errorf("META copy %d (partition %d) does not check after the write: %w", i+1, part.number, err)
		}
		if v, ok := back.get(TalosDownloadCode); !ok || string(v) != code {
			return TalosCodeResult{}, fmt.Errorf("META copy %d (partition %d) does not hold the fetch secret after the write", i+1, part.number)
		}
	}
	return res, nil
}

// talosADV is one copy's entries, in order.
type talosADV []talosEntry

type talosEntry struct {
	tag   uint32
	value []byte
}

func (a talosADV) get(tag uint32) ([]byte, bool) {
	var v []byte
	found := false
	for _, e := range a { // a later entry of the same tag is the one Talos keeps
		if e.tag == tag {
			v, found = e.value, true
		}
	}
	return v, found
}

// with is a with every entry of tag replaced by one holding value, after the others.
func (a talosADV) with(tag uint32, value []byte) talosADV {
	out := make(talosADV, 0, len(a)+1)
	for _, e := range a {
		if e.tag != tag {
			out = append(out, e)
		}
	}
	return append(out, talosEntry{tag, value})
}

// decodeTalosMeta reads META's two copies: the first if it checks, as Talos loads it; both
// zeroed is an empty META. A copy that does not check is refused even when the other does, as
// neither Talos's writer nor an image leaves one: the disk is not what the image wrote.
func decodeTalosMeta(raw []byte) (adv talosADV, empty bool, err error) {
	first, second := raw[:talosADVLength], raw[talosADVLength:]
	if allZero(first) && allZero(second) {
		return nil, true, nil
	}
	a, err1 := unmarshalTalosADV(first)
	_, err2 := unmarshalTalosADV(second)
	switch {
	case err1 == nil && err2 == nil:
		return a, len(a) == 0, nil
	case err1 != nil && err2 != nil:
		return nil, false, fmt.Errorf("is damaged: copy 1: %v; copy 2: %v", err1, err2)
	case err1 != nil:
		return nil, false, fmt.Errorf("is damaged: copy 1: %v (copy 2 checks)", err1)
	}
	return nil, false, fmt.Errorf("is damaged: copy 2: %v (copy 1 checks)", err2)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// unmarshalTalosADV reads one 256 KiB copy.
func unmarshalTalosADV(block []byte) (talosADV, error) {
	if len(block) != talosADVLength {
		return nil, fmt.Errorf("a copy is %d bytes, not %d", len(block), talosADVLength)
	}
	if m := binary.BigEndian.Uint32(block); m != talosADVMagic1 {
		return nil, fmt.Errorf("begins with %#08x, not META's magic %#08x", m, talosADVMagic1)
	}
	if m := binary.BigEndian.Uint32(block[len(block)-4:]); m != talosADVMagic2 {
		return nil, fmt.Errorf("ends with %#08x, not META's magic %#08x", m, talosADVMagic2)
	}
	sumAt := len(block) - talosADVTrailer
	if !bytes.Equal(talosADVChecksum(block), block[sumAt:sumAt+32]) {
		return nil, errors.New("its SHA-256 checksum does not match its content")
	}
	var a talosADV
	data := block[4:sumAt]
	for len(data) >= 8 {
		tag := binary.BigEndian.Uint32(data)
		if tag == talosADVEndTag {
			break
		}
		size := binary.BigEndian.Uint32(data[4:])
		if int64(size) > int64(len(data))-8 {
			return nil, fmt.Errorf("key %#x's value of %d bytes runs past the copy's end", tag, size)
		}
		a = append(a, talosEntry{tag, bytes.Clone(data[8 : 8+size])})
		data = data[8+size:]
	}
	return a, nil
}

// talosADVChecksum is the SHA-256 of block with its checksum's 32 bytes taken as zero.
func talosADVChecksum(block []byte) []byte {
	sumAt := len(block) - talosADVTrailer
	h := sha256.New()
	h.Write(block[:sumAt])
	h.Write(make([]byte, 32))
	h.Write(block[sumAt+32:])
	return h.Sum(nil)
}

// marshal is one 256 KiB copy of a.
func (a talosADV) marshal() ([]byte, error) {
	block := make([]byte, talosADVLength)
	binary.BigEndian.PutUint32(block, talosADVMagic1)
	binary.BigEndian.PutUint32(block[len(block)-4:], talosADVMagic2)
	data := block[4 : len(block)-talosADVTrailer]
	for _, e := range a {
		if 8+len(e.value) > len(data) {
			return nil, fmt.Errorf("its keys do not fit in a copy's %d bytes", talosADVLength-4-talosADVTrailer)
		}
		binary.BigEndian.PutUint32(data, e.tag)
		binary.BigEndian.PutUint32(data[4:], uint32(len(e.value))) //nolint:gosec // G115: under len(data), 256 KiB (checked above)
		copy(data[8:], e.value)
		data = data[8+len(e.value):]
	}
	sumAt := len(block) - talosADVTrailer
	copy(block[sumAt:sumAt+32], talosADVChecksum(block))
	return block, nil
}

// gptPartition is a partition the GPT lists: its number and where it is, in bytes.
type gptPartition struct {
	number       int
	offset, size int64
}

// gptSignature begins a GPT header, at LBA 1.
var gptSignature = []byte("EFI PART")

// findGPTPartition finds the one partition named name in d's primary GPT, whose header and
// entries must check (their CRC32s). The logical sector is 512 bytes, or 4096 when the header is
// there instead. The backup GPT is not read: the image was just written, and a primary that does
// not check means it was not written as it was built.
func findGPTPartition(d io.ReaderAt, name string) (gptPartition, error) {
	var hdr []byte
	var sector int64
	for _, s := range []int64{512, 4096} {
		b := make([]byte, 512)
		if _, err := d.ReadAt(b, s); err != nil && !errors.Is(err, io.EOF) {
			return gptPartition{}, fmt.Errorf("read the GPT header: %w", err)
		}
		if bytes.HasPrefix(b, gptSignature) {
			hdr, sector = b, s
			break
		}
	}
	if hdr == nil {
		return gptPartition{}, errors.New("has no GPT (no \"EFI PART\" header at LBA 1 for 512- or 4096-byte sectors): the image write did not leave a Talos disk image")
	}
	hdrSize := binary.LittleEndian.Uint32(hdr[12:])
	if hdrSize < 92 || hdrSize > 512 {
		return gptPartition{}, fmt.Errorf("the GPT header's size %d is not valid", hdrSize)
	}
	h := bytes.Clone(hdr[:hdrSize])
	want := binary.LittleEndian.Uint32(h[16:])
	binary.LittleEndian.PutUint32(h[16:], 0)
	if crc32.ChecksumIEEE(h) != want {
		return gptPartition{}, errors.New("the GPT header's CRC32 does not match: the partition table is damaged")
	}
	// An LBA is a uint64 on disk; one whose byte offset does not fit in an int64 would wrap to
	// another place on the disk, so it is refused rather than converted.
	maxLBA := uint64(math.MaxInt64 / sector) //nolint:gosec // G115: sector is 512 or 4096
	entriesLBA := binary.LittleEndian.Uint64(hdr[72:])
	count := binary.LittleEndian.Uint32(hdr[80:])
	entrySize := binary.LittleEndian.Uint32(hdr[84:])
	if entrySize < 128 || entrySize%8 != 0 || count == 0 || count > 4096 || entriesLBA < 2 || entriesLBA > maxLBA {
		return gptPartition{}, fmt.Errorf("the GPT lists %d entries of %d bytes at LBA %d: not a valid table", count, entrySize, entriesLBA)
	}
	entries := make([]byte, int(count)*int(entrySize))
	if _, err := d.ReadAt(entries, int64(entriesLBA)*sector); err != nil { //nolint:gosec // G115: entriesLBA <= maxLBA
		return gptPartition{}, fmt.Errorf("read the GPT entries: %w", err)
	}
	if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(hdr[88:]) {
		return gptPartition{}, errors.New("the GPT entries' CRC32 does not match: the partition table is damaged")
	}
	var found []gptPartition
	for i := range int(count) {
		e := entries[i*int(entrySize) : (i+1)*int(entrySize)]
		if allZero(e[:16]) { // an unused entry has no type
			continue
		}
		if gptName(e[56:128]) != name {
			continue
		}
		first, last := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if last < first {
			return gptPartition{}, fmt.Errorf("partition %d (%s) ends at LBA %d before it begins at %d", i+1, name, last, first)
		}
		if last >= maxLBA {
			return gptPartition{}, fmt.Errorf("partition %d (%s) lies past LBA %d, more than a disk of %d-byte sectors addresses: the partition table is damaged", i+1, name, maxLBA, sector)
		}
		off, end := int64(first)*sector, int64(last+1)*sector //nolint:gosec // G115: first <= last < maxLBA
		found = append(found, gptPartition{number: i + 1, offset: off, size: end - off})
	}
	switch len(found) {
	case 0:
		return gptPartition{}, fmt.Errorf("has no partition named %s: the image write did not leave a Talos disk image", name)
	case 1:
		return found[0], nil
	}
	nums := make([]string, len(found))
	for i, p := range found {
		nums[i] = fmt.Sprint(p.number)
	}
	return gptPartition{}, fmt.Errorf("has %d partitions named %s (%s); refusing to choose", len(found), name, strings.Join(nums, ", "))
}

// gptName is a GPT entry's name: UTF-16LE, up to the first NUL.
func gptName(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

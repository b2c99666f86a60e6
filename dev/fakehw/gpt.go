package fakehw

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"unicode/utf16"
)

// Partition is a GPT partition of a disk image, by name, in logical sectors (Last inclusive).
type Partition struct {
	Name        string
	First, Last int64
}

// TalosImageSize is the size of the disk image WriteTalosImage writes.
const TalosImageSize = 16 << 20

// TalosImage is the partition layout of a Talos metal disk image as Talos's imager builds it
// (EFI, BIOS, BOOT, META of 1 MiB, STATE), scaled down to a 16 MiB image, in sectors of the given
// size. META is partition 4.
func TalosImage(sector int64) []Partition {
	mib := (1 << 20) / sector
	return []Partition{
		{"EFI", 1 * mib, 4*mib - 1},
		{"BIOS", 4 * mib, 5*mib - 1},
		{"BOOT", 5 * mib, 8*mib - 1},
		{"META", 8 * mib, 9*mib - 1},
		{"STATE", 9 * mib, 12*mib - 1},
	}
}

// WriteTalosImage writes, to path, what image2disk leaves on a disk from a Talos metal image: a
// GPT disk of TalosImageSize with TalosImage's partitions in 512-byte sectors, META zeroed as the
// imager leaves it.
func WriteTalosImage(path string) error {
	return WriteGPT(path, TalosImageSize, 512, TalosImage(512))
}

// WriteGPT writes a disk image of size bytes to path: a protective MBR, then a primary and a
// backup GPT of 128 entries listing parts (type "Linux filesystem data"), laid out as the UEFI
// specification says; the rest is zeros.
func WriteGPT(path string, size, sector int64, parts []Partition) error {
	if len(parts) > 128 || size%sector != 0 {
		return fmt.Errorf("write GPT: %d partitions on %d bytes of %d-byte sectors", len(parts), size, sector)
	}
	lastLBA := size/sector - 1
	img := make([]byte, size)
	img[446+4] = 0xee // the protective MBR's one partition, over the disk
	binary.LittleEndian.PutUint32(img[446+8:], 1)
	binary.LittleEndian.PutUint32(img[446+12:], uint32(min(lastLBA, 0xffffffff)))
	img[510], img[511] = 0x55, 0xaa
	entries := make([]byte, 128*128)
	linuxData := []byte{0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4}
	for i, p := range parts {
		e := entries[i*128:]
		copy(e[0:16], linuxData)
		e[16], e[17] = byte(i+1), 0x5a // the partition's unique GUID
		binary.LittleEndian.PutUint64(e[32:], uint64(p.First))
		binary.LittleEndian.PutUint64(e[40:], uint64(p.Last))
		for j, c := range utf16.Encode([]rune(p.Name)) {
			if j == 36 {
				return fmt.Errorf("write GPT: the name %q is longer than 36 UTF-16 units", p.Name)
			}
			binary.LittleEndian.PutUint16(e[56+2*j:], c)
		}
	}
	entrySectors := (int64(len(entries)) + sector - 1) / sector
	header := func(my, alt, entriesLBA int64) []byte {
		h := make([]byte, 92)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000) // revision 1.0
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], uint64(my))
		binary.LittleEndian.PutUint64(h[32:], uint64(alt))
		binary.LittleEndian.PutUint64(h[40:], uint64(2+entrySectors))
		binary.LittleEndian.PutUint64(h[48:], uint64(lastLBA-1-entrySectors))
		h[56], h[57] = 0x42, 0x5a // the disk GUID
		binary.LittleEndian.PutUint64(h[72:], uint64(entriesLBA))
		binary.LittleEndian.PutUint32(h[80:], 128)
		binary.LittleEndian.PutUint32(h[84:], 128)
		binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
		return h
	}
	copy(img[sector:], header(1, lastLBA, 2))
	copy(img[2*sector:], entries)
	copy(img[(lastLBA-entrySectors)*sector:], entries)
	copy(img[lastLBA*sector:], header(lastLBA, 1, lastLBA-entrySectors))
	return os.WriteFile(path, img, 0o600)
}

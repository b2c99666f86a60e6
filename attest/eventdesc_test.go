package attest

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/google/go-attestation/attest"
)

// utf16le is s as UTF-16LE, with a terminating NUL when nul is set.
func utf16le(s string, nul bool) []byte {
	var b []byte
	for _, c := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	if nul {
		b = append(b, 0, 0)
	}
	return b
}

// node is a UEFI device path node (UEFI 2.10 §10.3.1): type, subtype, its whole length, data.
func node(typ, sub byte, data []byte) []byte {
	b := []byte{typ, sub}
	b = binary.LittleEndian.AppendUint16(b, uint16(4+len(data)))
	return append(b, data...)
}

// fileNode is a media device path's file path node; end is the end-of-path node.
func fileNode(path string) []byte { return node(0x04, 0x04, utf16le(path, true)) }

var end = []byte{0x7f, 0xff, 0x04, 0x00}

// imageLoad is a UEFI_IMAGE_LOAD_EVENT (TCG PC Client PFP 1.05 §10.2.3) whose device path is
// the nodes, and whose LengthOfDevicePath is their length plus extra.
func imageLoad(extra int, nodes ...[]byte) []byte {
	var path []byte
	for _, n := range nodes {
		path = append(path, n...)
	}
	d := make([]byte, 24) // ImageLocationInMemory, ImageLengthInMemory, ImageLinkTimeAddress
	d = binary.LittleEndian.AppendUint64(d, uint64(len(path)+extra))
	return append(d, path...)
}

// variable is a UEFI_VARIABLE_DATA (§10.2.3) naming name (UnicodeNameLength n, in characters;
// -1: the name's own length) with the given variable data.
func variable(name string, n int, data []byte) []byte {
	d := make([]byte, 16) // VariableName, the vendor GUID
	if n < 0 {
		n = len(utf16.Encode([]rune(name)))
	}
	d = binary.LittleEndian.AppendUint64(d, uint64(n))
	d = binary.LittleEndian.AppendUint64(d, uint64(len(data)))
	return append(append(d, utf16le(name, false)...), data...)
}

// TestDescribeEvent: the label a baseline event carries for people reading a drift explanation
// is the loaded image's file name, the measured variable's name, or the event's text; anything
// the data does not hold within its own lengths gives no label (never a read past them); the
// label is one line of printable ASCII of at most 48 characters.
func TestDescribeEvent(t *testing.T) {
	const (
		app     = attest.EventType(0x80000003) // EV_EFI_BOOT_SERVICES_APPLICATION
		varBoot = attest.EventType(0x80000002) // EV_EFI_VARIABLE_BOOT
		ipl     = attest.EventType(0x0000000D) // EV_IPL: text (grub's commands)
		action  = attest.EventType(0x80000007) // EV_EFI_ACTION: text
		sep     = attest.EventType(0x00000004) // EV_SEPARATOR
	)
	hardDrive := node(0x04, 0x01, make([]byte, 38)) // a media device path's hard drive node, before the file
	shim := fileNode(`\EFI\ubuntu\shimx64.efi`)
	long := strings.Repeat("x", 48)
	rows := []struct {
		name string
		typ  attest.EventType
		data []byte
		want string
	}{
		// Loaded images: the last file path node's base name.
		{"ok/image: the file path's base name", app, imageLoad(0, hardDrive, shim, end), "shimx64.efi"},
		{"ok/image: forward slashes", app, imageLoad(0, fileNode("/EFI/BOOT/BOOTX64.EFI"), end), "BOOTX64.EFI"},
		{"ok/image: a name right after the root", app, imageLoad(0, fileNode(`\vmlinuz`), end), "vmlinuz"},
		{"ok/image: a name without a directory", app, imageLoad(0, fileNode("grubx64.efi"), end), "grubx64.efi"},
		{"ok/image: the last of two file path nodes", app, imageLoad(0, fileNode(`\EFI`), fileNode("shim.efi"), end), "shim.efi"},
		{"ok/image: a node of no data before the file path", app, imageLoad(0, node(0x01, 0x01, nil), shim, end), "shimx64.efi"},
		{"ok/image: the file path node ends the path, no end node", app, imageLoad(0, hardDrive, shim), "shimx64.efi"},
		{"ok/image: an odd-length file path node: its last byte is not a character", app,
			imageLoad(0, node(0x04, 0x04, append(utf16le("a.efi", false), 'x')), end), "a.efi"},
		{"ok/image: nothing after the end node is read", app, imageLoad(0, end, shim), ""},
		{"ok/image: a last file path node of no name, at the path's very end: no name", app, imageLoad(0, shim, node(0x04, 0x04, nil)), ""},
		{"refuse/image: a device path longer than the event by one byte", app, imageLoad(1, shim, end), ""},
		{"refuse/image: a node longer than what is left of the path", app, imageLoad(0, node(0x04, 0x04, utf16le("a.efi", true))[:10]), ""},
		{"refuse/image: a node of length 0 (it would never end)", app, imageLoad(0, []byte{0x04, 0x04, 0x00, 0x00, 'a', 0}), ""},
		{"refuse/image: a header of 31 bytes", app, make([]byte, 31), ""},
		// Variables: the name, UnicodeNameLength characters of it.
		{"ok/variable: its name", varBoot, variable("SecureBoot", -1, []byte{1}), "SecureBoot"},
		{"ok/variable: a name that fills the event", varBoot, variable("db", -1, nil), "db"},
		{"refuse/variable: a name one character longer than the event", varBoot, variable("db", 3, nil), ""},
		{"refuse/variable: a name of twice the event's characters", varBoot, variable("Boot0001", 16, make([]byte, 8)), ""},
		{"refuse/variable: a header of 31 bytes", varBoot, make([]byte, 31), ""},
		// Text: ASCII or UTF-16LE, printable; tabs and line ends become spaces.
		{"ok/text: ASCII with trailing NULs", ipl, []byte("grub_cmd: linux /vmlinuz\x00\x00"), "grub_cmd: linux /vmlinuz"},
		{"ok/text: UTF-16LE", action, utf16le("Exit Boot Services Invocation", true), "Exit Boot Services Invocation"},
		{"ok/text: UTF-16LE of two characters (4 bytes)", action, utf16le("ab", false), "ab"},
		{"ok/text: tabs, line feeds and carriage returns", ipl, []byte("a\tb\nc\rd"), "a b c d"},
		{"ok/text: a space and a tilde are printable", ipl, []byte("~ a"), "~ a"},
		{"ok/text: 48 characters, kept whole", ipl, []byte(long), long},
		{"ok/text: 49 characters, cut to 45 and an ellipsis", ipl, []byte(long + "y"), long[:45] + "..."},
		{"refuse/text: a control character", ipl, []byte("a\x1fb"), ""},
		{"refuse/text: DEL", ipl, []byte("a\x7fb"), ""},
		{"refuse/text: beyond ASCII", ipl, []byte("caf\xc3\xa9"), ""},
		{"refuse/text: an odd length with NULs in UTF-16's places is not UTF-16", ipl, []byte{'a', 0, 'b', 0, 'c'}, ""},
		{"refuse/text: UTF-16 of a control character", action, utf16le("a\x01", false), ""},
		{"refuse/text: nothing", ipl, nil, ""},
		// Types whose data is no label.
		{"ok/separator: none", sep, []byte{0, 0, 0, 0}, ""},
	}
	for _, r := range rows {
		got := describeEvent(attest.Event{Type: r.typ, Data: r.data})
		if got != r.want {
			t.Errorf("%s: %q, want %q", r.name, got, r.want)
		}
	}
}

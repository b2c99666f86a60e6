package attest

import (
	"encoding/binary"
	"strings"
	"unicode/utf16"

	"github.com/google/go-attestation/attest"
)

// Event types go-attestation's EventType.String does not name (TCG PC Client PFP 1.05).
var extraEventTypes = map[attest.EventType]string{
	0x8000000A: "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
	0x8000000B: "EV_EFI_HANDOFF_TABLES2",
	0x8000000C: "EV_EFI_VARIABLE_BOOT2",
	0x800000E1: "EV_EFI_SPDM_FIRMWARE_BLOB",
	0x800000E2: "EV_EFI_SPDM_FIRMWARE_CONFIG",
}

func eventTypeName(t attest.EventType) string {
	if s, ok := extraEventTypes[t]; ok {
		return s
	}
	return t.String()
}

// descMax bounds a description's length in the baseline.
const descMax = 48

// describeEvent derives a short, printable description from an event's data: the file name of
// a loaded EFI image, the name of a measured EFI variable, or the text of a textual event. The
// data is the machine's (only its digest is verified for most types), so the description is a
// label for humans reading a drift explanation, never an input to a decision.
func describeEvent(e attest.Event) string {
	var s string
	switch eventTypeName(e.Type) {
	case "EV_EFI_BOOT_SERVICES_APPLICATION", "EV_EFI_BOOT_SERVICES_DRIVER", "EV_EFI_RUNTIME_SERVICES_DRIVER":
		s = imageFileName(e.Data)
	case "EV_EFI_VARIABLE_DRIVER_CONFIG", "EV_EFI_VARIABLE_BOOT", "EV_EFI_VARIABLE_BOOT2", "EV_EFI_VARIABLE_AUTHORITY":
		s = variableName(e.Data)
	case "EV_SEPARATOR", "EV_EFI_GPT_EVENT", "EV_EFI_PLATFORM_FIRMWARE_BLOB", "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
		"EV_EFI_HANDOFF_TABLES", "EV_EFI_HANDOFF_TABLES2":
		s = ""
	default:
		s = text(e.Data)
	}
	return sanitize(s)
}

// imageFileName returns the last file-path node of a UEFI_IMAGE_LOAD_EVENT's device path, base
// name only ("\EFI\ubuntu\shimx64.efi" gives "shimx64.efi").
func imageFileName(d []byte) string {
	const hdr = 32 // ImageLocationInMemory, ImageLengthInMemory, ImageLinkTimeAddress, LengthOfDevicePath
	if len(d) < hdr {
		return ""
	}
	n := binary.LittleEndian.Uint64(d[24:32])
	// G115 below: len(d) >= hdr, so len(d)-hdr is not negative, and n is at most that int.
	if n > uint64(len(d)-hdr) { //nolint:gosec // G115: see above
		return ""
	}
	path, name := d[hdr:hdr+int(n)], "" //nolint:gosec // G115: see above
	for len(path) >= 4 {
		typ, sub, l := path[0], path[1], int(binary.LittleEndian.Uint16(path[2:4]))
		if l < 4 || l > len(path) || typ == 0x7f { // end of device path
			break
		}
		if typ == 0x04 && sub == 0x04 { // media device path, file path
			name = utf16String(path[4:l])
		}
		path = path[l:]
	}
	if i := strings.LastIndexAny(name, `\/`); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// variableName returns the name of a UEFI_VARIABLE_DATA ("SecureBoot", "db", "Boot0001").
func variableName(d []byte) string {
	const hdr = 32 // VariableName GUID, UnicodeNameLength, VariableDataLength
	if len(d) < hdr {
		return ""
	}
	n := binary.LittleEndian.Uint64(d[16:24])
	// G115 below: len(d) >= hdr, so len(d)-hdr is not negative, and 2n is at most that int.
	if n > uint64(len(d)-hdr)/2 { //nolint:gosec // G115: see above
		return ""
	}
	return utf16String(d[hdr : hdr+2*int(n)]) //nolint:gosec // G115: see above
}

// text returns the data as text when it is printable ASCII or UTF-16LE ASCII, else "".
func text(d []byte) string {
	if len(d) >= 4 && len(d)%2 == 0 && d[1] == 0 && d[3] == 0 {
		if s := utf16String(d); printable(s) {
			return s
		}
	}
	s := strings.TrimRight(string(d), "\x00")
	if printable(s) {
		return s
	}
	return ""
}

func utf16String(b []byte) string {
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

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r > 0x7e {
			return false
		}
	}
	return s != ""
}

// sanitize makes a description one line of printable ASCII of at most descMax characters.
func sanitize(s string) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return ' '
		}
		return r
	}, s)), " ")
	if len(s) > descMax {
		s = s[:descMax-3] + "..."
	}
	return s
}

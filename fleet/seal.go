package fleet

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The seal of the fields fleetd owns (docs/design.md §9, "Sealed fields"): every write fleetd
// makes of a device carries, in fleet_seal, an HMAC-SHA256 under a key only fleetd has over the
// device id, the time of the write and every value fleetd owns, as the device will hold them
// after the write. A NetBox user who may edit devices can write any value, but not a seal that
// verifies for a value fleetd never wrote. A seal fleetd once wrote can be copied back with its
// values (a replay); NetBox's change log tells those apart (trust.go).
//
// The seal is versioned and names its key, so a key can be rotated while several instances
// share the keys: fs1.<key id>.<sealed at, Unix nanoseconds>.<base64url(HMAC-SHA256)>.

// SealKey is one HMAC-SHA256 key of the seal: an id (the seal names it) and the secret, read
// from a file (netbox.seal_keys in fleetd.yaml).
type SealKey struct {
	ID     string
	Secret []byte
}

// MinSealSecret is the shortest seal secret accepted: HMAC-SHA256's block of strength.
const MinSealSecret = 32

// sealVersion is the first part of a seal and the domain of its MAC input.
const sealVersion = "fs1"

// SealKeys is the key ring of the seal: the first key seals, every key verifies.
//
// Trust: the secrets are fleetd's only; whoever holds one can make fleetd vouch for any value.
type SealKeys struct {
	sign  SealKey
	byID  map[string][]byte
	order []string
}

// NewSealKeys builds the key ring. The first key signs every new seal; all of them verify. An
// id is 1 to 32 letters, digits, '-' or '_' (a seal is split at '.'), unique, and a secret at
// least MinSealSecret bytes.
func NewSealKeys(keys ...SealKey) (*SealKeys, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal keys: none given: fleetd needs at least one (netbox.seal_keys)")
	}
	k := &SealKeys{sign: keys[0], byID: map[string][]byte{}}
	for _, key := range keys {
		if !validKeyID(key.ID) {
			return nil, fmt.Errorf("seal key id %q: want 1 to 32 letters, digits, '-' or '_'", key.ID)
		}
		if len(key.Secret) < MinSealSecret {
			return nil, fmt.Errorf("seal key %s: its secret is %d bytes, fewer than %d", key.ID, len(key.Secret), MinSealSecret)
		}
		if _, dup := k.byID[key.ID]; dup {
			return nil, fmt.Errorf("seal key %s is listed twice", key.ID)
		}
		k.byID[key.ID] = key.Secret
		k.order = append(k.order, key.ID)
	}
	return k, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Signing is the id of the key new seals are made with.
func (k *SealKeys) Signing() string { return k.sign.ID }

// IDs are the configured key ids, the signing key first.
func (k *SealKeys) IDs() []string { return append([]string(nil), k.order...) }

// Seal is the seal of device id holding o, made at at with the signing key: the seal of o as
// fleetd will read it back from NetBox (readBack), so that what it writes verifies when read.
func (k *SealKeys) Seal(id int64, o Owned, at time.Time) string {
	mac := sealMAC(k.sign.Secret, k.sign.ID, id, at.UnixNano(), readBack(o))
	return sealVersion + "." + k.sign.ID + "." + strconv.FormatInt(at.UnixNano(), 10) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// SealResult is what the check of a seal found.
type SealResult string

const (
	SealValid      SealResult = "valid"       // made by a configured key over exactly these values
	SealMissing    SealResult = "missing"     // fleet_seal is empty
	SealMalformed  SealResult = "malformed"   // not a seal this fleetd reads
	SealUnknownKey SealResult = "unknown-key" // made with a key id that is not configured
	SealMismatch   SealResult = "mismatch"    // not the seal of these values of this device
)

// SealCheck is the verification of one seal.
type SealCheck struct {
	Result SealResult
	KeyID  string    // the key the seal names (empty when missing or malformed)
	At     time.Time // when the seal was made (valid seals only)
}

// Verify checks that seal is the seal of device id holding o under a configured key.
func (k *SealKeys) Verify(id int64, o Owned, seal string) SealCheck {
	if seal == "" {
		return SealCheck{Result: SealMissing}
	}
	parts := strings.Split(seal, ".")
	if len(parts) != 4 || parts[0] != sealVersion || !validKeyID(parts[1]) {
		return SealCheck{Result: SealMalformed}
	}
	nanos, errT := strconv.ParseInt(parts[2], 10, 64)
	got, errM := base64.RawURLEncoding.DecodeString(parts[3])
	if errT != nil || errM != nil || len(got) != sha256.Size {
		return SealCheck{Result: SealMalformed}
	}
	secret, ok := k.byID[parts[1]]
	if !ok {
		return SealCheck{Result: SealUnknownKey, KeyID: parts[1]}
	}
	if !hmac.Equal(sealMAC(secret, parts[1], id, nanos, o), got) {
		return SealCheck{Result: SealMismatch, KeyID: parts[1]}
	}
	return SealCheck{Result: SealValid, KeyID: parts[1], At: time.Unix(0, nanos).UTC()}
}

// sealMAC is the HMAC-SHA256 of the seal's canonical input.
func sealMAC(secret []byte, keyID string, id, nanos int64, o Owned) []byte {
	in := make([]byte, 0, 4096)
	in = appendField(in, "seal", sealVersion)
	in = appendField(in, "key", keyID)
	in = appendField(in, "device", strconv.FormatInt(id, 10))
	in = appendField(in, "sealed_at", strconv.FormatInt(nanos, 10))
	for _, f := range canonicalOwned(o) {
		in = appendField(in, f[0], f[1])
	}
	m := hmac.New(sha256.New, secret)
	m.Write(in)
	return m.Sum(nil)
}

// appendField appends one field of the canonical input: its name and its value, each preceded by
// its length (an unsigned varint), so no two inputs encode alike.
func appendField(b []byte, name, value string) []byte {
	for _, s := range []string{name, value} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// canonicalOwned is every field fleetd owns as its NetBox name and a canonical text of its value
// as fleetd reads it from NetBox, however NetBox stored it: strings trimmed with invalid UTF-8
// replaced (as the adapter reads them after JSON); last_boot_check RFC 3339 in UTC with
// nanoseconds; fleet_identity and fleet_facts fleetd's own JSON of the value it decoded (NetBox
// keeps JSON fields as jsonb, which reorders keys: raw JSON is never sealed), and facts fleetd
// cannot read one marker whatever they hold.
func canonicalOwned(o Owned) [13][2]string {
	last := ""
	if !o.LastBootCheck.IsZero() {
		last = o.LastBootCheck.UTC().Format(time.RFC3339Nano)
	}
	return [13][2]string{
		{"fleet_state", readBackText(string(o.State))},
		{"fleet_message", readBackText(o.Message)},
		{"fleet_request", readBackText(o.Request)},
		{"fleet_workflow", readBackText(o.Workflow)},
		{"ldevid_serial", readBackText(o.LDevIDSerial)},
		{"lak_serial", readBackText(o.LAKSerial)},
		{"ldevid_serial_previous", readBackText(o.LDevIDSerialPrevious)},
		{"lak_serial_previous", readBackText(o.LAKSerialPrevious)},
		{"boot_baseline", readBackText(o.BootBaseline)},
		{"last_boot_check", last},
		{"boot_check", readBackText(string(o.BootCheck))},
		{"fleet_identity", canonicalIdentity(o.Identity)},
		{"fleet_facts", canonicalFacts(o.Facts, o.FactsUnreadable)},
	}
}

// readBack is o as fleetd will read it back once written: its identity as its JSON decodes (a
// string with invalid UTF-8 comes back with U+FFFD, which JSON then writes as itself, not as an
// escape), its facts as layout.DecodeFacts reads their JSON (a value it cannot read is no facts,
// with the reason). The other fields read back as canonicalOwned writes them.
func readBack(o Owned) Owned {
	if !o.Identity.Empty() {
		var m IdentityMaterial
		if b, err := json.Marshal(o.Identity); err == nil && json.Unmarshal(b, &m) == nil {
			o.Identity = m
		}
	}
	if o.FactsUnreadable != "" || o.Facts.Empty() {
		return o
	}
	raw, err := json.Marshal(o.Facts)
	if err == nil {
		o.Facts, err = layout.DecodeFacts(raw)
	}
	if err != nil {
		o.Facts, o.FactsUnreadable = layout.Facts{}, err.Error()
	}
	return o
}

// readBackText is a text field as fleetd reads it back: encoded as JSON (each invalid UTF-8 byte
// becomes U+FFFD, as encoding/json writes it) and trimmed (the NetBox adapter trims).
func readBackText(s string) string {
	if !utf8.ValidString(s) {
		var b strings.Builder
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
		}
		s = b.String()
	}
	return strings.TrimSpace(s)
}

// canonicalIdentity is fleetd's JSON of an identity it read ("" for none, which fleetd writes as
// null): a decoded identity encodes to the bytes it was decoded from, whatever key order NetBox
// handed them back in.
func canonicalIdentity(m IdentityMaterial) string {
	if m.Empty() {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "!unencodable"
	}
	return string(b)
}

// canonicalFacts is fleetd's JSON of facts it read: "" for none, one marker for facts it could
// not read.
func canonicalFacts(f layout.Facts, unreadable string) string {
	if unreadable != "" {
		return "!unreadable"
	}
	if f.Empty() {
		return ""
	}
	b, err := json.Marshal(f)
	if err != nil {
		return "!unreadable"
	}
	return string(b)
}

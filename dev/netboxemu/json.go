package netboxemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The emulator builds every JSON document as a tree of these values, so that key order follows
// NetBox's serializers (Python dicts keep insertion order) and the webhook body can be written
// byte for byte the way Python's json.dumps writes it:
//   nil, bool, string, int, int64, float64, json.Number, obj, []any, map[string]any (sorted keys).

// field is one key of an ordered object.
type field struct {
	K string
	V any
}

// obj is a JSON object that keeps its keys in insertion order.
type obj []field

// get returns the value of key k.
func (o obj) get(k string) (any, bool) {
	for _, f := range o {
		if f.K == k {
			return f.V, true
		}
	}
	return nil, false
}

// encodeREST writes v the way DRF's JSONRenderer does: compact separators, UTF-8 kept as is.
func encodeREST(v any) []byte {
	var b bytes.Buffer
	e := encoder{buf: &b, itemSep: ",", keySep: ":"}
	e.value(v)
	return b.Bytes()
}

// encodePython writes v the way Python's json.dumps does with its defaults (NetBox's webhook
// body, NB@v4.6.8:netbox/extras/models/models.py Webhook.render_body): separators ", " and ": ",
// ensure_ascii (every non-ASCII character as \uXXXX, surrogate pairs above U+FFFF), floats as
// Python's repr.
func encodePython(v any) []byte {
	var b bytes.Buffer
	e := encoder{buf: &b, itemSep: ", ", keySep: ": ", ascii: true}
	e.value(v)
	return b.Bytes()
}

type encoder struct {
	buf     *bytes.Buffer
	itemSep string
	keySep  string
	ascii   bool
}

func (e encoder) value(v any) {
	switch x := v.(type) {
	case nil:
		e.buf.WriteString("null")
	case bool:
		e.buf.WriteString(strconv.FormatBool(x))
	case string:
		e.str(x)
	case int:
		e.buf.WriteString(strconv.Itoa(x))
	case int64:
		e.buf.WriteString(strconv.FormatInt(x, 10))
	case float64:
		e.buf.WriteString(pyFloat(x))
	case json.Number:
		e.number(x)
	case obj:
		e.buf.WriteByte('{')
		for i, f := range x {
			if i > 0 {
				e.buf.WriteString(e.itemSep)
			}
			e.str(f.K)
			e.buf.WriteString(e.keySep)
			e.value(f.V)
		}
		e.buf.WriteByte('}')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		o := make(obj, len(keys))
		for i, k := range keys {
			o[i] = field{k, x[k]}
		}
		e.value(o)
	case []any:
		e.buf.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				e.buf.WriteString(e.itemSep)
			}
			e.value(item)
		}
		e.buf.WriteByte(']')
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		e.value(items)
	default:
		panic(fmt.Sprintf("netboxemu: cannot encode %T", v))
	}
}

// number writes a decoded JSON number as Python would after json.loads: integers verbatim,
// anything with a fraction or exponent as a float.
func (e encoder) number(n json.Number) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		e.buf.WriteString(s)
		return
	}
	f, err := n.Float64()
	if err != nil {
		e.buf.WriteString(s)
		return
	}
	e.buf.WriteString(pyFloat(f))
}

func (e encoder) str(s string) {
	const hex = "0123456789abcdef"
	e.buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			e.buf.WriteString(`\"`)
		case r == '\\':
			e.buf.WriteString(`\\`)
		case r == '\n':
			e.buf.WriteString(`\n`)
		case r == '\r':
			e.buf.WriteString(`\r`)
		case r == '\t':
			e.buf.WriteString(`\t`)
		case r == '\b':
			e.buf.WriteString(`\b`)
		case r == '\f':
			e.buf.WriteString(`\f`)
		case r < 0x20 || (e.ascii && r >= 0x7f):
			if r > 0xffff {
				r -= 0x10000
				e.u16(0xd800+(r>>10)&0x3ff, hex)
				e.u16(0xdc00+r&0x3ff, hex)
				continue
			}
			e.u16(r, hex)
		default:
			e.buf.WriteRune(r)
		}
	}
	e.buf.WriteByte('"')
}

func (e encoder) u16(r rune, hex string) {
	e.buf.WriteString(`\u`)
	e.buf.WriteByte(hex[(r>>12)&0xf])
	e.buf.WriteByte(hex[(r>>8)&0xf])
	e.buf.WriteByte(hex[(r>>4)&0xf])
	e.buf.WriteByte(hex[r&0xf])
}

// pyFloat formats f as Python's float repr: the shortest round-tripping digits, in positional
// notation with at least one fractional digit when the decimal exponent is in [-4, 16), in
// exponent notation (e+XX, at least two exponent digits) otherwise.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+06
	mant, expStr, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expStr)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	point := exp + 1 // digits before the decimal point
	switch {
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits)) + ".0"
	}
	return sign + digits[:point] + "." + digits[point:]
}

// jsonbKeys orders object keys as PostgreSQL's jsonb stores them (shorter keys first, then
// bytewise), which is how NetBox's custom_field_data comes back from the database.
func jsonbKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	return keys
}

// decodeJSON decodes a request body keeping numbers as json.Number (Python keeps int and float
// apart; so does the emulator).
func decodeJSON(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("body is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("extra data after the JSON value")
	}
	return v, nil
}

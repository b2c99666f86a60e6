package netboxemu

import (
	"encoding/json"
	"testing"
)

// Expected outputs are what CPython 3.12's json.dumps and repr print for the same values.
func TestEncodePython(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"ok/separators", obj{{"a", 1}, {"b", []any{true, nil, "x"}}}, `{"a": 1, "b": [true, null, "x"]}`},
		{"ok/empty", obj{{"o", obj{}}, {"l", []any{}}}, `{"o": {}, "l": []}`},
		{"ok/ensure-ascii", "é€😀\x7f", `"\u00e9\u20ac\ud83d\ude00\u007f"`},
		{"ok/escapes", "a\"b\\c\nd\te\x01", `"a\"b\\c\nd\te\u0001"`},
		{"ok/slash-not-escaped", "/api/", `"/api/"`},
		{"ok/float-integral", 1.0, `1.0`},
		{"ok/float-small", 0.0001, `0.0001`},
		{"ok/float-smaller", 0.00001, `1e-05`},
		{"ok/float-large", 1e16, `1e+16`},
		{"ok/float-below-1e16", 1234567890123456.0, `1234567890123456.0`},
		{"ok/float-short-repr", 0.1, `0.1`},
		{"ok/float-negative", -2.5, `-2.5`},
		{"ok/number-int", json.Number("42"), `42`},
		{"ok/number-float", json.Number("2.50"), `2.5`},
		{"ok/number-exp", json.Number("1E3"), `1000.0`},
		{"ok/map-sorted", map[string]any{"b": 1, "a": 2}, `{"a": 2, "b": 1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(encodePython(tt.v)); got != tt.want {
				t.Errorf("encodePython = %s, want %s", got, tt.want)
			}
		})
	}
	if got := string(encodeREST(obj{{"a", "é"}, {"b", []any{1, 2}}})); got != `{"a":"é","b":[1,2]}` {
		t.Errorf("encodeREST = %s", got)
	}
}

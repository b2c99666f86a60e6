package netboxemu

import (
	"net/http"
	"sort"
	"strings"
)

// OPTIONS on a list or detail endpoint: DRF's SimpleMetadata through NetBox's
// BulkOperationMetadata (NB@v4.6.8:netbox/netbox/api/metadata.py): the view's name and
// description, its renderers and parsers, and for PUT and POST (when the token may write) each
// serializer field's type, required, read_only, label, max_length and, for choice fields, the
// choices as {value, display_name} (what clients such as pynetbox's choices() read).

// metaField is one serializer field as SimpleMetadata.get_field_info describes it.
type metaField struct {
	name     string
	typ      string // DRF's label_lookup: field, integer, string, boolean, datetime, json, nested object, list…
	required bool
	readOnly bool
	label    string // "" derives DRF's default from the name
	maxLen   int
	choices  func() [][2]string
}

func (c *reqCtx) options(res *resource, detail bool) {
	if detail {
		if _, ok := c.find(res); !ok {
			return
		}
	}
	suffix := " List"
	if detail {
		suffix = " Instance"
	}
	o := obj{{"name", res.verbose + suffix}, {"description", ""},
		{"renders", []any{"application/json", "text/html"}},
		{"parses", []any{"application/json", "multipart/form-data"}}}
	tok := c.token
	if !res.readOnly && tok != nil && tok.writeEnabled {
		info := fieldInfo(res.meta)
		o = append(o, field{"actions", obj{{"POST", info}, {"PUT", info}}})
	}
	c.write(http.StatusOK, o)
}

func fieldInfo(fields []metaField) obj {
	out := obj{}
	for _, f := range fields {
		label := f.label
		if label == "" {
			label = strings.ReplaceAll(f.name, "_", " ")
			label = strings.ToUpper(label[:1]) + label[1:]
		}
		info := obj{{"type", f.typ}, {"required", f.required}, {"read_only", f.readOnly}, {"label", label}}
		if f.maxLen > 0 {
			info = append(info, field{"max_length", f.maxLen})
		}
		if f.choices != nil && !f.readOnly {
			list := []any{}
			for _, ch := range f.choices() {
				list = append(list, obj{{"value", ch[0]}, {"display_name", ch[1]}})
			}
			info = append(info, field{"choices", list})
		}
		out = append(out, field{f.name, info})
	}
	return out
}

// choicesOf lists a choice set in its declared order (order gives the values in that order).
func choicesOf(labels map[string]string, order ...string) func() [][2]string {
	return func() [][2]string {
		if order == nil {
			order = make([]string, 0, len(labels))
			for v := range labels {
				order = append(order, v)
			}
			sort.Strings(order)
		}
		out := make([][2]string, 0, len(order))
		for _, v := range order {
			out = append(out, [2]string{v, labels[v]})
		}
		return out
	}
}

// Shorthands for field declarations.
func mRO(name, typ string) metaField  { return metaField{name: name, typ: typ, readOnly: true} }
func mRW(name, typ string) metaField  { return metaField{name: name, typ: typ} }
func mReq(name, typ string) metaField { return metaField{name: name, typ: typ, required: true} }
func mText(name string, n int, required bool) metaField {
	return metaField{name: name, typ: "string", maxLen: n, required: required}
}
func mPick(name string, required bool, ch func() [][2]string) metaField {
	return metaField{name: name, typ: "field", required: required, choices: ch}
}

// head and tail are the fields every NetBox model serializer starts and ends with.
var (
	metaHead = []metaField{{name: "id", typ: "integer", readOnly: true, label: "ID"}, mRO("url", "field"),
		mRO("display_url", "field"), mRO("display", "field")}
	metaTail = []metaField{mRO("created", "datetime"), mRO("last_updated", "datetime")}
)

func metaOf(parts ...[]metaField) []metaField {
	var out []metaField
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

package netboxemu

import (
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// reqCtx is one API request being handled: the authenticated user, the event queue NetBox
// fills while the request saves objects, and the response writer.
type reqCtx struct {
	e      *Emulator
	w      http.ResponseWriter
	r      *http.Request
	user   *user
	rc     rc
	events []*event // coalesced per object, flushed when the handler returns
	status int      // the answer, written after the events are flushed
	resp   []byte
}

// api wraps a handler: fault injection, token authentication (reference/netbox.md §3.1), the
// API-Version header, the database lock, and the event flush at the end of the request.
func (e *Emulator) api(write bool, fn func(*reqCtx)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("API-Version", apiVersion)
		if e.injectAPIFault(w, r) {
			return
		}
		c := &reqCtx{e: e, w: w, r: r, rc: rc{base: "http://" + r.Host}}
		e.mu.Lock()
		defer e.mu.Unlock()
		tok, msg := e.authenticate(r.Header.Get("Authorization"))
		switch {
		case msg != "":
			c.detail(http.StatusForbidden, msg)
			c.send()
			return
		case tok == nil:
			c.detail(http.StatusForbidden, "Authentication credentials were not provided.")
			c.send()
			return
		case write && !tok.writeEnabled:
			c.detail(http.StatusForbidden, "You do not have permission to perform this action.")
			c.send()
			return
		}
		c.user = e.db.users[tok.user]
		fn(c)
		c.flush() // NetBox queues the request's events before the response leaves
		c.send()
	})
}

// authenticate is NetBox's TokenAuthentication: the keyword (Token or Bearer, any case) only
// selects the scheme, the nbt_ prefix selects the token version. A nil token with an empty
// message means no credentials were given.
func (e *Emulator) authenticate(header string) (*token, string) {
	parts := strings.Fields(header)
	if len(parts) == 0 {
		return nil, ""
	}
	if kw := strings.ToLower(parts[0]); kw != "token" && kw != "bearer" {
		return nil, ""
	}
	if len(parts) != 2 {
		return nil, `Invalid authorization header: Must be in the form "Bearer <key>.<token>" or "Token <token>"`
	}
	value := parts[1]
	if rest, ok := strings.CutPrefix(value, "nbt_"); ok {
		key, plain, ok := strings.Cut(rest, ".")
		if !ok {
			return nil, "Invalid authorization header: Could not parse key from v2 token. Did you mean to use 'Token' instead of 'Bearer'?"
		}
		for _, t := range e.db.tokens {
			if t.version == 2 && t.key == key && subtle.ConstantTimeCompare([]byte(t.plaintext), []byte(plain)) == 1 {
				return t, ""
			}
		}
		return nil, "Invalid v2 token"
	}
	for _, t := range e.db.tokens {
		if t.version == 1 && subtle.ConstantTimeCompare([]byte(t.plaintext), []byte(value)) == 1 {
			return t, ""
		}
	}
	return nil, "Invalid v1 token"
}

func (c *reqCtx) now() time.Time { return c.e.cfg.Clock().UTC().Truncate(time.Microsecond) }

// write sets the answer: a JSON document with a status (nil: no body).
func (c *reqCtx) write(status int, v any) {
	c.status, c.resp = status, nil
	if v != nil {
		c.resp = encodeREST(v)
	}
}

// send writes the answer out.
func (c *reqCtx) send() {
	if c.status == 0 {
		c.status = http.StatusInternalServerError
	}
	if c.resp != nil {
		c.w.Header().Set("Content-Type", "application/json")
	}
	c.w.Header().Set("Vary", "Accept, Cookie, Origin")
	c.w.WriteHeader(c.status)
	_, _ = c.w.Write(c.resp)
}

// detail sends DRF's {"detail": msg} error shape.
func (c *reqCtx) detail(status int, msg string) {
	c.write(status, obj{{"detail", msg}})
}

// invalid sends a 400 with DRF's validation error shape (a map keyed by field).
func (c *reqCtx) invalid(errs obj) {
	c.write(http.StatusBadRequest, errs)
}

// body decodes the request's JSON object; on failure it has answered 400 and returns nil.
func (c *reqCtx) body() obj {
	raw, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, 10<<20))
	if err != nil {
		c.detail(http.StatusBadRequest, "JSON parse error - "+err.Error())
		return nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		c.detail(http.StatusBadRequest, "JSON parse error - "+err.Error())
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.invalid(obj{{"non_field_errors", []any{"Invalid data. Expected a dictionary, but got " + pyTypeName(v) + "."}}})
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	o := obj{}
	for _, k := range jsonOrder(raw, keys) {
		o = append(o, field{k, m[k]})
	}
	return o
}

// id parses the {id} path value; on failure it has answered 404.
func (c *reqCtx) id() (int, bool) {
	id, err := strconv.Atoi(c.r.PathValue("id"))
	if err != nil || id <= 0 {
		c.detail(http.StatusNotFound, "No matching object found.")
		return 0, false
	}
	return id, true
}

// jsonOrder orders keys by their first position in the raw JSON (Python dicts keep it).
func jsonOrder(raw []byte, keys []string) []string {
	pos := func(k string) int {
		i := strings.Index(string(raw), strconv.Quote(k))
		if i < 0 {
			return len(raw)
		}
		return i
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && pos(keys[j]) < pos(keys[j-1]); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func pyTypeName(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	}
	return "int"
}

// Pagination (NetBox's NetBoxPagination, offset mode): PAGINATE_COUNT 50, MAX_PAGE_SIZE 1000,
// limit=0 means MAX_PAGE_SIZE.
const (
	paginateCount = 50
	maxPageSize   = 1000
)

// page answers a list request with the items at [offset, offset+limit) of n, rendered by item.
func (c *reqCtx) page(n int, item func(i int) obj) {
	q := c.r.URL.Query()
	limit := paginateCount
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l >= 0 {
		limit = min(l, maxPageSize)
		if l == 0 {
			limit = maxPageSize
		}
	}
	offset := 0
	if o, err := strconv.Atoi(q.Get("offset")); err == nil && o > 0 {
		offset = o
	}
	results := []any{}
	render := func() {
		for i := offset; i < n && i < offset+limit; i++ {
			results = append(results, item(i))
		}
	}
	if min(n, offset+limit)-offset >= indexFrom {
		c.e.withIndex(render)
	} else {
		render()
	}
	var next, prev any
	link := func(off int) string {
		u := *c.r.URL
		v := u.Query()
		v.Set("limit", strconv.Itoa(limit))
		if off > 0 {
			v.Set("offset", strconv.Itoa(off))
		} else {
			v.Del("offset")
		}
		u.RawQuery = v.Encode()
		return c.rc.base + u.RequestURI()
	}
	if offset+limit < n {
		next = link(offset + limit)
	}
	if offset > 0 {
		prev = link(max(offset-limit, 0))
	}
	c.write(http.StatusOK, obj{{"count", n}, {"next", next}, {"previous", prev}, {"results", results}})
}

// intFilter reads a multi-valued integer filter (?id=1&id=2); on a bad value it has answered 400.
func (c *reqCtx) intFilter(name string) (set map[int]bool, ok bool) {
	vals := c.r.URL.Query()[name]
	if len(vals) == 0 {
		return nil, true
	}
	set = map[int]bool{}
	for _, v := range vals {
		n, err := strconv.Atoi(v)
		if err != nil {
			c.invalid(obj{{name, []any{fmt.Sprintf("Select a valid choice. %s is not one of the available choices.", v)}}})
			return nil, false
		}
		set[n] = true
	}
	return set, true
}

// strFilter reads a multi-valued string filter.
func (c *reqCtx) strFilter(name string) map[string]bool {
	vals := c.r.URL.Query()[name]
	if len(vals) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, v := range vals {
		set[v] = true
	}
	return set
}

// pass reports whether v passes a filter set (a nil set passes everything).
func pass[K comparable](set map[K]bool, v K) bool {
	return set == nil || set[v]
}

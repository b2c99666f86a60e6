package netboxemu

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// reqCtx is one API request being handled: the authenticated user, the event queue NetBox
// fills while the request saves objects, and the response writer.
type reqCtx struct {
	e        *Emulator
	w        http.ResponseWriter
	r        *http.Request
	user     *user
	token    *token
	rc       rc
	events   []*event // coalesced per object, flushed when the handler returns
	status   int      // the answer, written after the events are flushed
	resp     []byte
	value    any       // the answer's document, before encoding (bulk creates collect errors from it)
	raw      []byte    // the request body as read (key order of its objects)
	message  string    // the write's changelog_message, recorded with its changes
	reqID    string    // the request's id (requestID), shared by its change records and webhooks
	touched  time.Time // the last last_updated this request gave an object (touch)
	rendered int       // the objects a list answer rendered (Config.LatencyObjects)
}

// api wraps a handler: fault injection, token authentication
// (NB@v4.6.8:netbox/netbox/api/authentication.py), the API-Version header, the database lock,
// and the event flush at the end of the request.
func (e *Emulator) api(write bool, fn func(*reqCtx)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("API-Version", apiVersion)
		e.requests.add(r.Pattern)
		if e.injectAPIFault(w, r) || !e.wait(r) {
			return
		}
		c := &reqCtx{e: e, w: w, r: r, rc: rc{base: "http://" + r.Host,
			noContext: strings.Contains(r.URL.Query().Get("exclude"), "config_context")}}
		e.mu.Lock()
		e.handle(c, write, fn)
		e.mu.Unlock()
		e.waitPage(c) // a large page takes NetBox longer to render, outside the emulator's lock
		c.send()
	})
}

// handle authenticates the request and runs fn, under the emulator's lock, leaving the answer in
// c for send.
func (e *Emulator) handle(c *reqCtx, write bool, fn func(*reqCtx)) {
	tok, msg := e.authenticate(c.r.Header.Get("Authorization"))
	switch {
	case msg != "":
		c.detail(http.StatusForbidden, msg)
		return
	case tok == nil:
		c.detail(http.StatusForbidden, "Authentication credentials were not provided.")
		return
	case write && !tok.writeEnabled:
		c.detail(http.StatusForbidden, "You do not have permission to perform this action.")
		return
	}
	c.user, c.token = e.db.users[tok.user], tok
	fn(c)
	if ex := c.flush(); ex != nil { // NetBox queues the request's events before the answer leaves
		c.failedFlush(ex)
	}
}

// waitPage spends the part of Config.Latency a list's page adds (Config.LatencyObjects): a page
// of n objects takes Latency × n/LatencyObjects in all, Latency of it already spent by wait.
func (e *Emulator) waitPage(c *reqCtx) {
	if e.cfg.Latency <= 0 || e.cfg.LatencyObjects <= 0 || c.rendered <= e.cfg.LatencyObjects {
		return
	}
	extra := e.cfg.Latency * time.Duration(c.rendered-e.cfg.LatencyObjects) / time.Duration(e.cfg.LatencyObjects)
	e.sleep(c.r.Context(), extra)
}

// wait spends Config.Latency before the request takes the lock; false means the client went
// away meanwhile (nothing is answered).
func (e *Emulator) wait(r *http.Request) bool {
	if e.cfg.Latency <= 0 {
		return true
	}
	return e.sleep(r.Context(), e.cfg.Latency)
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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
	c.status, c.resp, c.value = status, nil, v
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
		if c.w.Header().Get("Content-Type") == "" {
			c.w.Header().Set("Content-Type", "application/json")
		}
		// Django's CommonMiddleware (in NetBox's MIDDLEWARE) sets Content-Length on every
		// answer that is not streamed, so NetBox's REST answers carry it, lists included.
		c.w.Header().Set("Content-Length", strconv.Itoa(len(c.resp)))
	}
	c.w.Header().Set("Vary", "Accept, Cookie, Origin")
	c.w.WriteHeader(c.status)
	_, _ = c.w.Write(c.resp)
}

// detail sends DRF's {"detail": msg} error shape.
func (c *reqCtx) detail(status int, msg string) {
	c.write(status, obj{{"detail", msg}})
}

// invalid sends a 400 with DRF's validation error shape (a map keyed by field), or the 500 of
// an exception the validation raised (input.raise).
func (c *reqCtx) invalid(errs obj) {
	if ex := raised(errs); ex != nil {
		c.exception(ex)
		return
	}
	c.write(http.StatusBadRequest, errs)
}

// exception is the 500 NetBox answers when a view raises an exception nothing catches: the
// middleware's process_exception renders it for the REST API
// (NB@v4.6.8:netbox/utilities/error_handlers.py handle_rest_api_exception).
func (c *reqCtx) exception(ex *pyException) {
	c.e.cfg.Logger.Error().Str("method", c.r.Method).Str("path", c.r.URL.Path).Str("exception", ex.typ).
		Str("error", ex.msg).Msg("netbox emulator: the request raised an exception NetBox does not catch (500)")
	c.write(http.StatusInternalServerError, exceptionBody(ex.typ, ex.msg))
}

// exceptionBody is handle_rest_api_exception's JSON.
func exceptionBody(typ, msg string) obj {
	return obj{{"error", msg}, {"exception", typ}, {"netbox_version", Version}, {"python_version", "3.12.3"}}
}

// failedFlush is the answer when processing the request's events raised an exception: it
// leaves CoreMiddleware's request processors (NB@v4.6.8:netbox/netbox/context_managers.py
// event_tracking) after the view's answer was made and the transaction committed, so Django
// answers with NetBox's handler_500 HTML page instead, without the API-Version header
// CoreMiddleware would have added after it. (Inferred from the code, not observed.)
func (c *reqCtx) failedFlush(ex *pyException) {
	c.e.cfg.Logger.Error().Str("method", c.r.Method).Str("path", c.r.URL.Path).Str("exception", ex.typ).
		Str("error", ex.msg).Msg("netbox emulator: an event rule's conditions raised an exception NetBox does not catch; the change is saved, the answer is 500")
	c.status, c.value = http.StatusInternalServerError, nil
	c.resp = []byte("<!DOCTYPE html>\n<html><head><title>Server Error</title></head><body><h1>Server Error</h1>\n" +
		"<p>" + html.EscapeString(ex.typ+": "+ex.msg) + "</p>\n<p>NetBox " + Version + ", Python 3.12.3</p></body></html>\n")
	c.w.Header().Set("Content-Type", "text/html; charset=utf-8")
	c.w.Header().Del("API-Version")
}

// body decodes the request's JSON object; on failure it has answered 400 and returns nil.
func (c *reqCtx) body() obj {
	v, ok := c.anyBody()
	if !ok {
		return nil
	}
	return c.objectOf(v)
}

// anyBody decodes the request's JSON document (object or list); on failure it has answered 400.
func (c *reqCtx) anyBody() (any, bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, 10<<20))
	if err != nil {
		c.detail(http.StatusBadRequest, "JSON parse error - "+err.Error())
		return nil, false
	}
	c.raw = raw
	v, err := decodeJSON(raw)
	if err != nil {
		c.detail(http.StatusBadRequest, "JSON parse error - "+err.Error())
		return nil, false
	}
	return v, true
}

// optionalBody decodes a body that may be empty (DELETE); nil without one.
func (c *reqCtx) optionalBody() (obj, bool) {
	if c.r.ContentLength == 0 {
		return nil, true
	}
	b := c.body()
	return b, b != nil
}

// objectOf keeps a decoded JSON object's keys in the order the raw request had them (Python
// dicts keep it); anything but an object gets DRF's 400.
func (c *reqCtx) objectOf(v any) obj {
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
	for _, k := range jsonOrder(c.raw, keys) {
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

// pyTypeName is type(v).__name__ of the value Python's json module decodes from v's JSON.
func pyTypeName(v any) string {
	switch x := v.(type) {
	case []any, []string:
		return "list"
	case string:
		return "str"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	case map[string]any, obj:
		return "dict"
	case float64:
		return "float"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "float"
		}
	}
	return "int"
}

package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

// TestDecisionLine: a node request's one decision line is at info for a success, at warn with the
// refusal as its reason for a refusal (capped at maxReason bytes, a reason of exactly that many
// kept whole), at error with the error for fleetd's own failure; a refused request whose outcome
// names no check is logged under the refusal's code, one that names its check keeps it.
func TestDecisionLine(t *testing.T) {
	exact := strings.Repeat("a", maxReason)
	for _, r := range []struct {
		name             string
		out              fleet.Outcome
		err              error
		level, check     string
		reason, errField string
	}{
		{"ok/success: info", fleet.Outcome{Device: "node-a", Result: "attested"}, nil, "info", "", "", ""},
		{"refuse/a refusal: warn, its code as the check, its message as the reason", fleet.Outcome{Device: "node-a"},
			fleet.Refuse(fleet.RefusedConflict, "no_request", "node-a has no request"), "warn", "no_request", "no_request: node-a has no request", ""},
		{"refuse/a refusal whose outcome names its check keeps it", fleet.Outcome{Device: "node-a", Check: "request_mismatch"},
			fleet.Refuse(fleet.RefusedConflict, "no_request", "m"), "warn", "request_mismatch", "no_request: m", ""},
		{"error/fleetd's own failure: error, with the error", fleet.Outcome{Device: "node-a"},
			errors.New("render: boom"), "error", "", "", "render: boom"},
	} {
		var logs bytes.Buffer
		s := &Server{deps: Deps{Logger: zerolog.New(&logs)}}
		if r.err == nil {
			s.decision(httptest.NewRecorder(), r.out, nil)
		} else {
			s.nodeError(httptest.NewRecorder(), r.out, r.err) // logs the decision, then answers
		}
		var line map[string]any // the first line: fleetd's own failure is logged again by writeError
		if first, _, _ := bytes.Cut(logs.Bytes(), []byte("\n")); json.Unmarshal(first, &line) != nil {
			t.Fatalf("%s: log %q", r.name, logs.String())
		}
		if line["level"] != r.level || line["message"] != "decision" || str(line["check"]) != r.check ||
			str(line["reason"]) != r.reason || str(line["error"]) != r.errField {
			t.Errorf("%s: %v, want level %s check %q reason %q error %q", r.name, line, r.level, r.check, r.reason, r.errField)
		}
	}
	for _, r := range []struct {
		name, msg, want string
	}{
		{"ok/exactly the cap: whole", exact[:maxReason-len("no_request: ")], "no_request: " + exact[:maxReason-len("no_request: ")]},
		{"ok/one byte more: cut, with an ellipsis", exact[:maxReason-len("no_request: ")+1], "no_request: " + exact[:maxReason-len("no_request: ")] + "…"},
	} {
		var logs bytes.Buffer
		s := &Server{deps: Deps{Logger: zerolog.New(&logs)}}
		s.decision(httptest.NewRecorder(), fleet.Outcome{}, fleet.Refuse(fleet.RefusedConflict, "no_request", "%s", r.msg))
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line["reason"] != r.want {
			t.Errorf("%s: reason of %d bytes, want %d (%v)", r.name, len(str(line["reason"])), len(r.want), err)
		}
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestBearerNeverMatchesAnEmptyToken: a token check against no configured token accepts nothing,
// not even an empty bearer (the callers configure one; this is the check's own guarantee).
func TestBearerNeverMatchesAnEmptyToken(t *testing.T) {
	s := &Server{guesses: newAddrLimiter(Limits{PerMinute: 10, Burst: 10})}
	for _, h := range []string{"Bearer ", "Bearer", ""} {
		r := httptest.NewRequest("GET", "/v1/devices", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if ok, _, _ := s.bearer(r, nil); ok {
			t.Errorf("Authorization %q passed a check against no token", h)
		}
	}
}

// TestRetryAfter: a rate-limited answer tells the whole seconds to wait, rounded up so that a
// client that waits them finds a token.
func TestRetryAfter(t *testing.T) {
	for wait, want := range map[time.Duration]string{1500 * time.Millisecond: "2", 100 * time.Millisecond: "1", 3 * time.Second: "4"} {
		w := httptest.NewRecorder()
		rateLimited(w, netip.MustParseAddr("10.0.0.5"), wait)
		if got := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || got != want {
			t.Errorf("wait %v: %d Retry-After %q, want 429 %q", wait, w.Code, got, want)
		}
	}
}

// TestLimiterEdges: a limit without a burst takes one request at once; a source is exhausted
// with less than one token, not with one, and is told how long until it has one at its rate;
// full buckets are swept a minute after the last sweep, not at the minute; and with the table
// full a sweep runs from a second after the last one, so that a source whose bucket refilled
// gives way.
func TestLimiterEdges(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")

	l := newAddrLimiter(Limits{PerMinute: 60}) // a token a second, no burst given
	if ok, _ := l.allow(a, t0); !ok {
		t.Fatal("a limit without a burst refused the first request")
	}
	if out, wait := l.exhausted(a, t0.Add(250*time.Millisecond)); !out || wait != 750*time.Millisecond {
		t.Errorf("a quarter of a token in: exhausted %v, wait %v; want true, 750ms", out, wait)
	}
	if out, _ := l.exhausted(a, t0.Add(time.Second)); out {
		t.Error("with exactly one token again the source is exhausted")
	}
	// The wait is what is missing of a token over the rate: at a token every 10 s, a quarter of
	// one in leaves 7.5 s (at a token a second the wait equals what is missing, whatever the
	// division does).
	l = newAddrLimiter(Limits{PerMinute: 6})
	l.allow(a, t0)
	if out, wait := l.exhausted(a, t0.Add(2500*time.Millisecond)); !out || wait != 7500*time.Millisecond {
		t.Errorf("a token every 10 s, a quarter in: exhausted %v, wait %v; want true, 7.5s", out, wait)
	}

	// The sweep of full buckets: not at the minute, after it.
	l = newAddrLimiter(Limits{PerMinute: 60, Burst: 1, MaxSources: 8})
	l.swept = t0
	l.allow(a, t0)
	l.allow(b, t0.Add(time.Minute)) // a's bucket is full again: a sweep would drop it
	if n := l.tracked(); n != 2 {
		t.Errorf("a minute after the last sweep, %d sources tracked, want 2 (no sweep yet)", n)
	}
	l.allow(b, t0.Add(time.Minute+time.Nanosecond))
	if n := l.tracked(); n != 1 {
		t.Errorf("just past a minute after the last sweep, %d sources tracked, want 1 (a swept)", n)
	}

	// A full table sweeps from a second after its last sweep.
	l = newAddrLimiter(Limits{PerMinute: 60, Burst: 1, MaxSources: 1})
	l.swept = t0
	l.allow(a, t0) // a fills the table; its bucket is full again a second later
	if ok, _ := l.allow(b, t0.Add(time.Second)); !ok {
		t.Error("a second after the last sweep, a new source got no token")
	}
	if l.buckets[source(b)] == nil || l.buckets[source(a)] != nil {
		t.Errorf("a second after the last sweep, a's full bucket was not swept for b: %v", l.buckets)
	}
}

// TestWrap: every route's wrapper logs the status the handler answered (200 for a body written
// without one, the first of two), bounds a route that declares no body to 1 KiB, and answers a
// handler's panic with a 500 unless the handler had answered already.
func TestWrap(t *testing.T) {
	for _, r := range []struct {
		name       string
		h          http.HandlerFunc
		body       string
		wantStatus int // the answer and the access line's status
		wantCode   string
	}{
		{"ok/a body without a status: 200", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }, "", 200, ""},
		{"ok/the first status of two", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.WriteHeader(http.StatusConflict)
		}, "", 404, ""},
		{"ok/a body of 1 KiB read whole", readAll, strings.Repeat("a", kib), 200, ""},
		{"refuse/a body of 1 KiB and a byte", readAll, strings.Repeat("a", kib+1), 413, ""},
		{"error/a panic before any answer: 500", func(http.ResponseWriter, *http.Request) { panic("boom") }, "", 500, "internal"},
		{"error/a panic after the answer: the answer stands", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			panic("boom")
		}, "", 202, ""},
	} {
		var logs bytes.Buffer
		h := wrap(zerolog.New(&logs).Level(zerolog.DebugLevel), Route{Name: "test"}, r.h)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/x", strings.NewReader(r.body)))
		var access map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			var line map[string]any
			if json.Unmarshal(l, &line) == nil && line["message"] == "http" {
				access = line
			}
		}
		var answer map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &answer)
		if w.Code != r.wantStatus || access == nil || access["status"] != float64(r.wantStatus) || str(answer["error"]) != r.wantCode {
			t.Errorf("%s: answered %d %s, access line %v; want %d %q", r.name, w.Code, w.Body, access, r.wantStatus, r.wantCode)
		}
	}
}

// readAll reads the request's body: 200 when it could, 413 when the body was over its limit.
func readAll(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	w.WriteHeader(http.StatusOK)
}

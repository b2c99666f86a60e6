package handlers

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// statusWriter remembers the status code for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection under the writer (a webhook's body
// read deadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// wrap adds what every route has: an X-Request-Id on the response, the route's body limit,
// recovery from a panic as a 500, and an access line at debug level (the decision line is the
// handler's own, at info).
func wrap(log zerolog.Logger, rt Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := w.Header().Get("X-Request-Id") // set by Server.ServeHTTP for every request
		sw := &statusWriter{ResponseWriter: w}
		limit := rt.MaxBody
		if limit == 0 {
			limit = 1 * kib
		}
		r.Body = http.MaxBytesReader(sw, r.Body, limit)
		defer func() {
			if p := recover(); p != nil {
				log.Error().Str("request_id", id).Str("route", rt.Name).Interface("panic", p).Msg("handler panicked")
				if sw.status == 0 {
					writeError(sw, log, errPanic)
				}
			}
			log.Debug().Str("request_id", id).Str("route", rt.Name).Str("method", r.Method).
				Str("path", r.URL.Path).Str("remote", r.RemoteAddr).Int("status", sw.status).
				Dur("duration", time.Since(start)).Msg("http")
		}()
		h.ServeHTTP(sw, r)
	})
}

type panicError struct{}

func (panicError) Error() string { return "handler panicked" }

var errPanic = panicError{}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

package handlers

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// statusOf maps a refusal class to its status code.
func statusOf(c fleet.RefusalClass) int {
	switch c {
	case fleet.RefusedForbidden:
		return http.StatusForbidden
	case fleet.RefusedNotFound:
		return http.StatusNotFound
	case fleet.RefusedConflict:
		return http.StatusConflict
	case fleet.RefusedGone:
		return http.StatusGone
	case fleet.RefusedTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// writeError answers a failed request: a refusal with its class's 4xx and safe message, NetBox
// unavailable with 503, anything else with 500 and a message that points at the log line (the
// detail stays in the log: STYLE habit 3).
func writeError(w http.ResponseWriter, log zerolog.Logger, err error) {
	if r, ok := fleet.AsRefusal(err); ok {
		writeJSON(w, statusOf(r.Class), api.Error{Code: r.Code, Message: r.Msg})
		return
	}
	if errors.Is(err, fleet.ErrInventory) {
		log.Error().Err(err).Msg("netbox unavailable")
		msg := "fleetd could not reach NetBox; retry shortly"
		if errors.Is(err, fleet.ErrChangeLog) {
			msg = "fleetd could not read NetBox's change log (/api/core/object-changes/; its log says why); retry shortly"
		}
		writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: "netbox_unavailable", Message: msg})
		return
	}
	log.Error().Err(err).Msg("internal error")
	writeJSON(w, http.StatusInternalServerError, api.Error{Code: api.CodeInternal,
		Message: "fleetd failed to handle the request; its log has the detail under request id " + w.Header().Get("X-Request-Id")})
}

// writeJSON answers with v as indented JSON. Messages are written as they read: encoding/json's
// default HTML escaping would send "<token>" as "\u003ctoken\u003e", which no API client wants.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decodeJSON reads a JSON request body strictly within the route's limit: an unknown member, a
// member given twice, a name that matches a field only in another case and invalid UTF-8 are
// refused, so that fleetd and any other reader of the same bytes cannot see two different
// requests. It decodes with the JSON v2 implementation (github.com/go-json-experiment/json, what
// Go ships as encoding/json/v2 behind GOEXPERIMENT=jsonv2, and tailscale uses), whose defaults
// are these checks and which reads an evidence body, some 50 KB of mostly base64 event log, in
// about half encoding/json's time. The body is read once into a buffer of its declared length and
// decoded in place: encoding/json's Decoder would copy it again into a buffer grown by doubling,
// about two and a half times the body in garbage per request (docs/performance.md).
func decodeJSON(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fleet.Refuse(fleet.RefusedTooLarge, api.CodeTooLarge, "the request body is larger than %d bytes", tooBig.Limit)
		}
		return fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body could not be read: %v", err)
	}
	if err := jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body is not the expected JSON: %v", err)
	}
	return nil
}

// maxPrealloc caps what a request's Content-Length alone can make fleetd allocate before its
// bytes arrive; a longer body grows the buffer as it is read, up to the route's limit.
const maxPrealloc = 256 << 10

// readBody reads the whole body (already capped by the route's http.MaxBytesReader): into a
// buffer of its declared length when it has one, or else growing as it is read.
func readBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > maxPrealloc {
		return io.ReadAll(r.Body)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

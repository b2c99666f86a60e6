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
// detail stays in the log: a caller learns nothing of fleetd's insides from it).
func writeError(w http.ResponseWriter, log zerolog.Logger, err error) {
	if r, ok := fleet.AsRefusal(err); ok {
		writeJSON(w, statusOf(r.Class), api.Error{Code: r.Code, Message: r.Msg})
		return
	}
	if errors.Is(err, fleet.ErrNetBoxUnavailable) {
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
// are these checks, and straight from the body through its pooled buffers: an evidence body is
// some 50 KB, most of it base64 event log, which encoding/json's Decoder read at about half the
// speed and copied into a buffer grown by doubling, about two and a half times the body in garbage
// per request (docs/performance.md).
func decodeJSON(r *http.Request, v any) error {
	return decodeJSONFrom(r.Body, v)
}

// decodeJSONFrom is decodeJSON of a body already begun (the evidence's head, then the rest).
func decodeJSONFrom(body io.Reader, v any) error {
	err := jsonv2.UnmarshalRead(body, v, jsonv2.RejectUnknownMembers(true))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		return fleet.Refuse(fleet.RefusedTooLarge, api.CodeTooLarge, "the request body is larger than %d bytes", tooBig.Limit)
	}
	return fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body is not the expected JSON: %v", err)
}

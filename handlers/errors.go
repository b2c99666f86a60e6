package handlers

import (
	"encoding/json"
	"errors"
	"net/http"

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
		writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: "netbox_unavailable",
			Message: "fleetd could not reach NetBox; retry shortly"})
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

// decodeJSON reads a JSON request body strictly (unknown fields refused) within the route's limit.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fleet.Refuse(fleet.RefusedTooLarge, api.CodeTooLarge, "the request body is larger than %d bytes", tooBig.Limit)
		}
		return fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body is not the expected JSON: %v", err)
	}
	if dec.More() {
		return fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "the request body has data after the JSON object")
	}
	return nil
}

package api

import "fmt"

// Error is every error response body (docs/design.md §6): a stable code and one sentence. A 4xx is a
// refusal (the caller or the device is wrong: the message says what and is safe to show); a 5xx
// is fleetd's own failure (the message points at its log).
type Error struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Codes the enrollment routes answer with besides the attestation checks. The attestation
// refusals use the check names of package attest as their code (attest.Check: "ek_not_approved",
// "quote_invalid", "disk_absent", …).
const (
	CodeMalformed     = "malformed"      // the body is not the expected JSON (400)
	CodeTooLarge      = "too_large"      // the body is over the route's limit (400)
	CodeUnknownDevice = "unknown_device" // NetBox has no device of that name (404)
	CodeNotExpected   = "not_expected"   // the device has no request that runs an enrollment now (409)
	CodeInternal      = "internal"       // fleetd failed; see its log (500)
)

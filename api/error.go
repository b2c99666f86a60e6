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

// Codes every route may answer with besides the domain's refusals. The attestation refusals use
// the check names of package attest as their code (attest.Check: "ek_not_approved",
// "quote_invalid", "disk_absent", …); the domain's others are fleet.Refusal codes.
const (
	CodeMalformed         = "malformed"          // the body is not the expected JSON (400)
	CodeTooLarge          = "too_large"          // the body is over the route's limit (413)
	CodeBadSignature      = "bad_signature"      // a webhook's X-Hook-Signature is missing or wrong (401)
	CodeNetBoxUnavailable = "netbox_unavailable" // NetBox could not be read or written; retry shortly (503)
	CodeQueueFull         = "queue_full"         // fleetd's webhook queue is full; retry after Retry-After (503)
	CodeBusy              = "busy"               // every webhook slot of the source's pool is taken; retry after Retry-After (503)
	CodeTimeout           = "timeout"            // the body did not arrive within fleetd's read timeout (408)
	CodeInternal          = "internal"           // fleetd failed; see its log (500)
)

package attest

import (
	"errors"
	"fmt"
	"strings"
)

// Check names one verification step. It is the stable code of a refusal, which the HTTP API
// returns as its "error" field.
type Check string

// The checks, in the order an enrollment runs them.
const (
	CheckTPMVersion    Check = "tpm_unsupported"     // the machine's TPM is not a TPM 2.0
	CheckEKMalformed   Check = "ek_malformed"        // the EK public key or certificate does not parse
	CheckEKApproved    Check = "ek_not_approved"     // the EK's SHA-256 is not among the device's ek_sha256
	CheckEKCertMissing Check = "ek_cert_missing"     // hash+cert, no EK certificate sent, and none declared absent
	CheckEKCertChain   Check = "ek_cert_untrusted"   // the EK certificate does not chain to the manufacturer bundle
	CheckEKCertKey     Check = "ek_cert_mismatch"    // the EK certificate is for another key
	CheckAK            Check = "ak_invalid"          // the AK is not a TPM-resident restricted signing key
	CheckToken         Check = "token_invalid"       // the token was not sealed by fleetd or was altered
	CheckTokenExpired  Check = "token_expired"       // the token's lifetime is over
	CheckTokenBinding  Check = "token_mismatch"      // the token belongs to another device, EK or AK
	CheckActivation    Check = "activation_failed"   // the AK could not decrypt the credential: not on that EK's TPM
	CheckQuote         Check = "quote_invalid"       // the quote's signature, nonce or PCR digest is wrong
	CheckEventLog      Check = "eventlog_invalid"    // the event log does not replay to the quoted PCRs
	CheckSecureBoot    Check = "secureboot_disabled" // the class requires Secure Boot and the log shows it off
	CheckBootPolicy    Check = "boot_policy"         // the verified boot components are not in the boot policy
	CheckLDevID        Check = "ldevid_invalid"      // the LDevID key or its certification is wrong
	CheckDiskAbsent    Check = "disk_absent"         // no disk with the declared serial
	CheckDiskAmbiguous Check = "disk_ambiguous"      // more than one disk with the declared serial
	CheckDiskMalformed Check = "disk_malformed"      // a claimed disk path is not an absolute path
	// CheckClaimMalformed is a claimed fact fleetd would not keep (layout.Facts): a MAC that is not
	// one, a disk serial or path beyond its cap or with control characters.
	CheckClaimMalformed Check = "claim_malformed"
)

// Refusal is the outcome of a failed check: the machine's evidence is wrong, not fleetd. Its
// message names the values for fleetd's log (capped; it may quote what the machine sent); what a
// node or NetBox is told is the fixed sentence of its Check (fleet.PublicSentence).
type Refusal struct {
	Check Check
	Msg   string // one sentence naming what was wrong and the values involved
	Err   error  // the underlying library error, when there is one
}

func (r *Refusal) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("%s: %s: %v", r.Check, r.Msg, r.Err)
	}
	return fmt.Sprintf("%s: %s", r.Check, r.Msg)
}

func (r *Refusal) Unwrap() error { return r.Err }

// AsRefusal returns the refusal in err's chain, if there is one.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}

// maxRefusalMsg caps a refusal's message, which may quote values the machine sent (disk serials,
// a certificate's issuer) for fleetd's log; callers answer nodes with a fixed sentence instead.
const maxRefusalMsg = 1024

func refuse(c Check, format string, args ...any) *Refusal {
	return &Refusal{Check: c, Msg: capMsg(fmt.Sprintf(format, args...))}
}

func refuseErr(c Check, err error, format string, args ...any) *Refusal {
	return &Refusal{Check: c, Msg: capMsg(fmt.Sprintf(format, args...)), Err: err}
}

func capMsg(s string) string {
	if len(s) <= maxRefusalMsg {
		return s
	}
	return strings.ToValidUTF8(s[:maxRefusalMsg], "") + "…"
}

// TPM versions as the agent reports them.
const (
	TPMVersion20 = "2.0"
	TPMVersion12 = "1.2"
)

// RequireTPM20 refuses any TPM but a 2.0 (docs/design.md §1: TPM 1.2 machines cannot use this path).
func RequireTPM20(claimedVersion string) error {
	switch claimedVersion {
	case TPMVersion20:
		return nil
	case TPMVersion12:
		return refuse(CheckTPMVersion, "the machine has a TPM 1.2; fleetd attests only TPM 2.0 machines, so this machine cannot be enrolled")
	case "":
		return refuse(CheckTPMVersion, "the agent found no TPM on the machine")
	default:
		return refuse(CheckTPMVersion, "the agent reported TPM version %.16q; fleetd attests only TPM 2.0", claimedVersion)
	}
}

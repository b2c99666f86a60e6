package fleet

import (
	"context"
	"unicode/utf8"

	"github.com/folly-infra/fleetd/attest"
)

// What a node is told, and what NetBox is told about a node, is a fixed sentence per refusal
// code: never text the caller sent (a device name, a TPM version, a certificate's issuer), never
// the device's declaration (its approved ek_sha256), and never longer than a sentence
// (docs/security.md, "Claimed input"). The detail that names the values stays in fleetd's log,
// quoted and capped.

// publicSentences are the fixed sentences of the node-facing refusal codes.
var publicSentences = map[string]string{
	// The enrollment (docs/enrollment.md).
	"unknown_device": "NetBox has no device of the name the Workflow passed: the Workflow must pass the device's NetBox name.",
	// Any node route (docs/security.md, "What a NetBox device editor can do").
	"owned_fields_untrusted":           "The fields fleetd keeps on the device in NetBox were not written by fleetd and could not be put back: nothing is decided on them until an owner asks for a new request.",
	"seal_key_unknown":                 "The device's fields in NetBox are sealed with a key this fleetd is not configured with: nothing is decided on them until the key is added.",
	"no_request":                       "The device has no accepted request waiting for attestation: set desired_action in NetBox first.",
	"request_mismatch":                 "The Workflow's request is not the device's current request: this Workflow is stale and must not enroll.",
	"class_not_installable":            "The device's class is not an installable class in classes.json.",
	string(attest.CheckTPMVersion):     "The machine has no TPM 2.0: fleetd attests only TPM 2.0 machines.",
	string(attest.CheckEKMalformed):    "The EK public key or certificate the machine sent does not parse.",
	string(attest.CheckEKApproved):     "The machine's EK is not among the device's approved ek_sha256: approve it in NetBox if this is the declared machine.",
	string(attest.CheckEKCertMissing):  "The fleet's EK policy needs an EK certificate and the machine sent none: declare ek_certificate none in NetBox if its TPM has none.",
	string(attest.CheckEKCertChain):    "The EK certificate does not chain to the manufacturer CA bundle.",
	string(attest.CheckEKCertKey):      "The EK certificate is for another key than the EK.",
	string(attest.CheckAK):             "The attestation key is not a TPM-resident restricted signing key.",
	string(attest.CheckToken):          "The token was not sealed by this fleetd or was altered: start the enrollment again.",
	string(attest.CheckTokenExpired):   "The token expired: start the enrollment again.",
	string(attest.CheckTokenBinding):   "The token belongs to another device, EK, AK or request: start the enrollment again.",
	string(attest.CheckActivation):     "The attestation key could not decrypt the credential: it is not in the TPM of the approved EK.",
	string(attest.CheckQuote):          "A quote's signature, nonce or PCR values are wrong.",
	string(attest.CheckEventLog):       "The event log does not replay to the quoted PCRs.",
	string(attest.CheckSecureBoot):     "The class requires Secure Boot and the verified event log does not show it enabled.",
	string(attest.CheckBootPolicy):     "The verified boot is not one the boot policy allows: the machine did not boot the fleet's HookOS.",
	string(attest.CheckLDevID):         "The LDevID key or its certification is wrong.",
	string(attest.CheckDiskAbsent):     "No disk of the machine has the declared disk_serial: nothing is wiped.",
	string(attest.CheckDiskAmbiguous):  "More than one disk of the machine has the declared disk_serial: nothing is wiped.",
	string(attest.CheckDiskMalformed):  "A disk path the machine sent is not a clean absolute path.",
	string(attest.CheckClaimMalformed): "A fact the machine claimed (its MAC, a disk serial or path) is malformed or longer than fleetd keeps.",
	"lak_blob_missing":                 "A provision's evidence needs lak_blob: run an agent image as new as fleetd.",
	"ldevid_private_missing":           "A provision's evidence needs ldevid_private: run an agent image as new as fleetd.",
	"config_rejected":                  "The node's configuration would be rejected by its OS, so the request failed and nothing was wiped.",
	"malformed":                        "The request body is not the expected JSON.",
	"too_large":                        "The request body is larger than the route allows.",
	// The boot check (docs/boot-checks.md).
	string(attest.CheckNonceInvalid): "The nonce token was not issued by this fleetd or was altered: ask for a new nonce.",
	string(attest.CheckNonceExpired): "The nonce expired: ask for a new nonce and quote at once.",
	string(attest.CheckLAKMalformed): "The LAK certificate is missing or does not parse.",
	string(attest.CheckLAKUntrusted): "The LAK certificate was not issued by the fleet's LAK CA or has expired.",
	string(attest.CheckLAKMismatch):  "The key that quoted is not the key of the LAK certificate.",
	"lak_not_current":                "The LAK certificate is not the device's current LAK: the machine was reprovisioned, wiped or retired since.",
	"lak_replaced":                   "The LAK certificate was replaced by a renewal and the node has presented the renewed one since: lak.pem must be the renewed certificate.",
	"not_active":                     "The device is not an active node: boot checks are taken only from active devices.",
	"replayed":                       "The nonce was issued before the device's last accepted boot check: ask for a new nonce.",
	// The configuration fetch (docs/http.md).
	"missing_uuid":         "The query has no uuid: fetch with ?uuid=<SMBIOS system UUID>.",
	"unknown_address":      "No configuration is served to this address for this UUID.",
	"address_shared":       "More than one NetBox device has this address as its primary IPv4: give each machine its own address.",
	"wrong_kind":           "The configuration pending for this machine is of another class kind: fetch it from its own route.",
	"wrong_uuid":           "The uuid in the query is not the SMBIOS UUID the machine attested with.",
	"fetch_secret_missing": "The fetch presents no fetch secret, and the machine's attestation handed one out: pass the agent's fetch-secret file to the fetch (Talos: code=${code} in its talos.config= URL, and the talos-meta step in the Template).",
	"wrong_fetch_secret":   "The fetch secret is not the one the machine's attestation handed out.",
	"config_expired":       "The configuration expired before it was fetched: provision the device again.",
	"config_lost":          "The pending configuration was lost when fleetd restarted: provision the device again.",
	"config_delivered":     "The configuration was already delivered and is served only once: provision the device again for a new one.",
	"device_renamed":       "The device was renamed in NetBox since the machine attested, and its certificates carry the old name: rename it back, or provision it again.",
	"no_pending_config":    "No configuration is pending for this machine: it is rendered when a provision request attests.",
	"bad_peer":             "fleetd cannot read the request's source address.",
	// The wipe receipt (docs/http.md, "Wipe receipts").
	string(attest.CheckReceiptToken):      "The receipt token was not sealed by this fleetd or was altered: the wipe is not confirmed.",
	string(attest.CheckReceiptExpired):    "The receipt token expired: the wipe is not confirmed; ask for the wipe again.",
	string(attest.CheckReceiptMismatch):   "The receipt token belongs to another device or request.",
	string(attest.CheckReceiptMalformed):  "The wipe report or the quote is malformed.",
	string(attest.CheckReceiptNonce):      "The quote was not made over this receipt's nonce and the report sent.",
	string(attest.CheckReceiptBoot):       "The quote was not made in the attested boot: the TPM was reset or its PCRs changed since the attestation.",
	string(attest.CheckReceiptSignature):  "The quote's signature does not verify under the attestation key the wipe's attestation activated.",
	string(attest.CheckReceiptDisk):       "The wipe program reported erasing another disk than the declared disk_serial.",
	string(attest.CheckReceiptWipeFailed): "The wipe program reported that the erase did not succeed: the wipe is not confirmed.",
	"receipt_request_ended":               "The receipt's request is not the device's running wipe or retirement: it ended, or the receipt was sent before.",
}

// unknownSentence answers a refusal code the table lacks (a new code added without its sentence).
const unknownSentence = "fleetd refused the request; its log has the reason."

// PublicSentence is the fixed sentence for a node-facing refusal code: what the handlers answer
// a node with, and what fleetd writes into NetBox about a node's refusal.
func PublicSentence(code string) string {
	if s, ok := publicSentences[code]; ok {
		return s
	}
	return unknownSentence
}

// Caps on what fleetd writes into NetBox: fleet_message is one sentence, a journal entry a
// paragraph (a boot drift lists its changed events).
const (
	MaxMessage      = 512
	MaxJournalEntry = 4096
)

// capText cuts s to at most n bytes on a rune boundary, marking the cut with "…".
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// cappedNetBox caps every message fleetd writes into NetBox, whichever step wrote it.
type cappedNetBox struct{ NetBox }

func (c cappedNetBox) Update(ctx context.Context, id int64, p Patch) (Device, error) {
	if p.Message != nil {
		m := capText(*p.Message, MaxMessage)
		p.Message = &m
	}
	return c.NetBox.Update(ctx, id, p)
}

func (c cappedNetBox) Journal(ctx context.Context, id int64, kind JournalKind, text string) error {
	return c.NetBox.Journal(ctx, id, kind, capText(text, MaxJournalEntry))
}

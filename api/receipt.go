package api

// A wipe's or a retirement's receipt (docs/http.md, "Wipe receipts"): the evidence answer of an
// accepted wipe or retirement carries a ReceiptGrant; after the erase, `fleetd wipe-receipt`
// quotes the SHA-256 PCRs with the attestation's AK over the receipt's extraData
// (attest.ReceiptExtraData of the grant's nonce and the wipe program's report) and posts a
// ReceiptRequest to PathWipeReceipt. fleetd records the device wiped (or retired) only on a
// receipt that verifies.

// PathWipeReceipt is the receipt route.
const PathWipeReceipt = "/v1/wipe/receipt"

// MaxReceiptBody bounds a receipt: the token (about 2.5 KiB), the report, and one quote with its
// signature (under 1 KiB for an RSA-2048 AK), base64, with room to spare.
const MaxReceiptBody = 32 << 10

// ReceiptGrant is what an accepted wipe or retirement hands the agent for its receipt: the sealed
// token, which the receipt brings back unchanged, and the nonce the receipt's quote covers (the
// token hides it).
type ReceiptGrant struct {
	Token string `json:"token"`
	Nonce []byte `json:"nonce"`
}

// ReceiptRequest is a wipe receipt.
//
// Device and Token are its first members, in this order (json.Marshal keeps the declaration's):
// fleetd authenticates the token before it reads the rest of the body, as for the evidence, and
// refuses a body that does not begin with them as malformed.
type ReceiptRequest struct {
	Device  string `json:"device"`
	Token   string `json:"token"`
	Request string `json:"request"` // the request the enrollment attested
	// The wipe program's report, as its wipe-result file says it (docs/operate.md, "The wipe
	// receipt step"): the serial of the disk it erased, how, its result ("erased" when the
	// erase succeeded) and the bytes its method covered.
	DiskSerial string `json:"disk_serial"`
	Method     string `json:"method"`
	Result     string `json:"result"`
	Bytes      uint64 `json:"bytes"`
	// Quote is the TPM2_Quote of the SHA-256 PCRs 0 to 23 by the attestation's AK over the
	// receipt's extraData.
	Quote Quote `json:"quote"`
}

// ReceiptResponse is fleetd's answer to a receipt it verified: Result says what it did with it
// ("recorded": the device is wiped or retired).
type ReceiptResponse struct {
	Result string `json:"result"`
}

// The agent image's entrypoint is `fleetd enroll`, and a Tinkerbell action cannot change an
// image's entrypoint: an action says what the agent does in its environment. AgentActionEnv is
// AgentActionEnroll on the first action of every Template (fleetd's Template check requires it),
// AgentActionWipeReceipt on a wipe's or retirement's receipt step, which `fleetd enroll` hands to
// `fleetd wipe-receipt`, and AgentActionTalosMeta on a Talos provision's step after the image
// write, which it hands to `fleetd talos-meta`.
const (
	AgentActionEnv         = "FLEETD_ACTION"
	AgentActionEnroll      = "enroll"
	AgentActionWipeReceipt = "wipe-receipt"
	AgentActionTalosMeta   = "talos-meta"
)

// WipeResultFile is the file of the Workflow's shared directory where the wipe program reports
// its erase for the receipt step (docs/operate.md, "The wipe receipt step").
const WipeResultFile = "wipe-result"

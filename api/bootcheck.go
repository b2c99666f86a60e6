package api

import "time"

// The boot check (docs/design.md §5): a running node, hourly, proves with the AK fleetd certified at its
// enrollment (the LAK) that it booted what it booted. Two round trips:
//
//  1. POST /v1/boot-check/nonce (no body → BootCheckNonce). fleetd draws a nonce and seals it
//     with the time into a token; no state is kept.
//  2. POST /v1/boot-check (BootCheckRequest → BootCheckResponse). The node sends the token back
//     with its LAK certificate, quotes of every PCR bank over the nonce, the PCR values and the
//     event log. fleetd identifies the device by the certificate, verifies everything, compares
//     the boot with the device's baseline and records the outcome in NetBox.
//
// A refusal is a 4xx with an Error body; its code is the failed check (docs/boot-checks.md).
const (
	PathBootCheckNonce = "/v1/boot-check/nonce"
	PathBootCheck      = "/v1/boot-check"
)

// MaxBootCheckBody limits a boot check request: an event log (tens of KiB, a few hundred at
// most), quotes of up to four banks, a certificate chain; base64 adds a third.
const MaxBootCheckBody = 2 << 20

// BootCheckNonce is the first round trip's answer.
type BootCheckNonce struct {
	Nonce     []byte    `json:"nonce"`      // what the quotes must carry as qualifying data
	Token     string    `json:"token"`      // opaque; sent back unchanged in BootCheckRequest
	ExpiresAt time.Time `json:"expires_at"` // the check must arrive before this
}

// BootCheckRequest is the second round trip's request.
type BootCheckRequest struct {
	Token    string   `json:"token"`
	LAKChain [][]byte `json:"lak_chain"` // DER certificates as lak.pem holds them: the LAK leaf first (only the leaf is used)
	Platform Platform `json:"platform"`  // quotes by the LAK's AK over the nonce, PCRs, event log
	// LDevID is the node's proof that it still holds its LDevID key in the same TPM, sent when
	// the node has ldevid.pem, ldevid.pub and ldevid.priv; fleetd renews the LDevID only with it
	// (docs/enrollment.md, "Renewal").
	LDevID *BootCheckLDevID `json:"ldevid,omitempty"`
	// Claimed is what the node says of its hardware, gathered as the enrollment gathers it, so a
	// swapped disk or interface on an installed node shows in fleet_facts; absent from an agent
	// older than fleet_facts (fleetd then keeps the facts it has). Untrusted and capped like the
	// enrollment's (layout.Facts).
	Claimed *BootCheckClaims `json:"claimed,omitempty"`
}

// BootCheckClaims is the claimed part of a boot check.
type BootCheckClaims struct {
	SMBIOS SMBIOS `json:"smbios"`
	Disks  []Disk `json:"disks"`
	MAC    string `json:"mac,omitempty"` // the interface of the node's default route
}

// BootCheckLDevID is the LDevID part of a boot check.
type BootCheckLDevID struct {
	Chain [][]byte `json:"chain"` // ldevid.pem as DER, the leaf first: its serial says which LDevID the node holds
	// Certification is a TPM2_Certify of the key loaded from ldevid.pub and ldevid.priv, signed
	// by the LAK's AK with the check's nonce as qualifying data.
	Certification Certification `json:"certification"`
}

// Outcomes of an accepted boot check (NetBox boot_check). A check that fails verification is a
// refusal, not a response.
const (
	BootCheckOK    = "ok"
	BootCheckDrift = "drift"
)

// BootCheckResponse is an accepted check: the boot verified and was recorded.
type BootCheckResponse struct {
	Device        string    `json:"device"`
	Outcome       string    `json:"outcome"`           // "ok" or "drift"
	BaselineTaken bool      `json:"baseline_taken"`    // this check set the device's boot_baseline (first check after an install)
	Changes       []string  `json:"changes,omitempty"` // for drift: how the boot differs from the baseline, one sentence per event
	SecureBoot    string    `json:"secure_boot"`       // "enabled", "disabled" or "unknown (…)", from the verified events
	CheckedAt     time.Time `json:"checked_at"`        // the time recorded as last_boot_check
	// Renewal is set when a certificate of the node had passed its renewal point, or the node
	// still holds one a renewal replaced: the new certificates, or why they were not issued.
	Renewal *Renewal `json:"renewal,omitempty"`
}

// Renewal is what an accepted boot check did about the node's certificates (docs/enrollment.md,
// "Renewal"). A chain that is set replaces the node's file (ldevid.pem, lak.pem) as it is, leaf
// first; the TPM keys and their blobs stay. Refused is set when a due certificate was not renewed:
// the node keeps the one it has until it expires.
type Renewal struct {
	LDevIDChain [][]byte `json:"ldevid_chain,omitempty"`
	LAKChain    [][]byte `json:"lak_chain,omitempty"`
	Refused     string   `json:"refused,omitempty"` // a code of docs/enrollment.md's renewal refusals
	Message     string   `json:"message,omitempty"` // why, and what to do
}

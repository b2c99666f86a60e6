// Package attest verifies a machine's TPM evidence: pure checks over bytes the machine sent,
// each returning a Verified… value or a *Refusal that names the check and the values (docs/design.md §4).
// Only Verified… values authorize anything: a certificate is issued for a VerifiedLDevIDKey or a
// VerifiedAK, never for bytes a machine claims.
//
// The package wraps go-attestation (github.com/google/go-attestation/attest) and never
// re-implements its TPM structure parsing or signature checks; it adds the checks go-attestation
// leaves to its caller (EK approval and certificate chain, the AK's attributes stated plainly,
// the certification nonce, duplicate PCRs, the SHA-256 bank's coverage, Secure Boot policy,
// disks) and the sealed token that carries the first round trip's state to the second.
//
// Trust assumptions: every argument named claimed… is untrusted input from the machine; approved
// EK hashes, the manufacturer CA bundle, the token key, the nonce and the declared disk serial
// are fleetd's own. The package imports nothing of fleetd and no network code.
//
// How fleet's enrollment uses it (fleet/enroll.go, fleet/enroll_evidence.go; docs/design.md §4;
// the wire types are in package api, decoded by the handlers):
//
//	// POST /v1/attest/challenge
//	RequireTPM20(in.ClaimedTPMVersion)
//	ek := ekVerifier.Verify(in.EKPublic, in.EKCert, EKApproval{device.EKHashes, device.NoEKCert})
//	ch := NewAKChallenge(ek, in.AK, rand)
//	nonce := NewNonce(rand)
//	token := sealer.Seal(TokenClaims{DeviceID, Device, Request, ek.SHA256, ek.HWSerialNum,
//		ch.AKDigest, ch.Secret, nonce})
//	→ {token, ch.Credential, nonce}
//
//	// POST /v1/attest/evidence
//	tok := sealer.Open(in.Token, Binding{DeviceID, Device, device.EKHashes, in.Platform.Public})
//	ak := VerifyActivation(tok, in.Secret, in.Platform.Public)
//	boot := VerifyPlatform(ak, tok.Claims().Nonce, in.Platform)
//	RequireSecureBoot(boot, class.SecureBoot == required)
//	bootPolicy.Check(boot, class.Name)
//	key := VerifyLDevIDKey(ak, tok.Claims().Nonce, in.LDevID)
//	disk := MatchDisk(device.DiskSerial, in.Disks)
//	then pki: IssueLDevID(identity, key.Public), IssueLAK(identity, ak.Public)
//	→ {ldevid chain, lak chain, disk.Path}
//
// And fleet's boot check (fleet/bootcheck.go; docs/boot-checks.md):
//
//	// POST /v1/boot-check
//	nonce := bootNonces.Open(in.Token)
//	lak := lakVerifier.Verify(in.LAKChain)          // names the device
//	ak := lak.AK(in.Platform.Public)
//	boot := VerifyPlatform(ak, nonce.Nonce, in.Platform)
//	RequireSecureBoot(boot, class.SecureBoot == required)
//	then the boot is compared with the device's baseline
//
// And a wipe's or a retirement's receipt (receipt.go; docs/http.md, "Wipe receipts"):
//
//	// POST /v1/attest/evidence of a wipe or retirement, once everything above verified
//	ticket := receipts.Issue(ReceiptGrant{device, request, action, ak, boot, disk, class.Timeout})
//	→ {…, receipt: {ticket.Token, ticket.Nonce}}
//
//	// POST /v1/wipe/receipt, after the erase
//	tok := receipts.Authenticate(in.Token)          // before the rest of the body is read
//	r := VerifyReceipt(tok, ClaimedReceipt{in.Device, in.Request, in.Report, in.Quote})
//	then fleet records the device wiped (or retired) from r, if its request is still running
//
// Every error above is a *Refusal (4xx, its Check is the API error code; fleet.AsRefusal reads
// it so at the edge) except fleetd's own failures (randomness, sealing), which are plain errors
// (5xx).
package attest

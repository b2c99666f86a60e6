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
// How the enrollment handlers use it (docs/design.md §4; the wire types are in package api):
//
//	// POST /v1/attest/challenge
//	RequireTPM20(req.TPMVersion)
//	ek := ekVerifier.Verify(req.EK.Public, req.EK.Certificate, EKApproval{device.EKHashes, device.NoEKCert})
//	ch := NewAKChallenge(ek, req.AK.Attest(), rand)
//	nonce := NewNonce(rand)
//	token := sealer.Seal(TokenClaims{DeviceID, Device, Request, ek.SHA256, ek.HWSerialNum,
//		ch.AKDigest, ch.Secret, nonce})
//	→ {token, ch.Credential, nonce}
//
//	// POST /v1/attest/evidence
//	tok := sealer.Open(req.Token, Binding{DeviceID, Device, device.EKHashes, req.Platform.AKPublic})
//	ak := VerifyActivation(tok, req.Secret, req.Platform.AKPublic)
//	boot := VerifyPlatform(ak, tok.Claims().Nonce, platform)
//	RequireSecureBoot(boot, class.SecureBoot == required)
//	key := VerifyLDevIDKey(ak, tok.Claims().Nonce, req.LDevID.Attest())
//	disk := MatchDisk(device.DiskSerial, disks)
//	then pki: IssueLDevID(identity, key.Public), IssueLAK(identity, ak.Public)
//	→ {ldevid chain, lak chain, disk.Path}
//
// Every error above is a *Refusal (4xx, its Check is the API error code) except the few marked
// as fleetd's own failures (randomness, sealing), which are plain errors (5xx).
package attest

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	goattest "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// The enrollment exchange (docs/design.md §1 steps 3–4, §4): the HookOS agent proves with its TPM that it
// holds an approved EK, then sends its evidence; fleetd verifies everything against the NetBox
// declaration, records the outcome, and answers with the certificates and the disk it may wipe.
//
// Trust: every field of ChallengeInput and EvidenceInput is a claim of whoever reached the route.
// Nothing in them authorizes anything until attest/ returns a Verified… value for it. The device
// is looked up by the claimed name; the claims are then checked against that device's declaration.

// Attestation is what the enrollment and the boot check need besides the ports: the fleet's EK
// policy, the sealer of the token that carries the first round trip's state, the certificate
// issuer, the boot policy (which HookOS boots may enroll); for the boot check (bootcheck.go), the
// LAK CA's verifier and the nonce sealer.
type Attestation struct {
	EK         *attest.EKVerifier
	Tokens     *attest.TokenSealer
	Issuer     *pki.Issuer
	BootPolicy *attest.BootPolicy // nil refuses every enrollment (fleetd's error): fleetd needs one
	LAK        *attest.LAKVerifier
	BootNonces *attest.BootNonceSealer
	// Receipts issues a wipe's or a retirement's receipt token with its accepted evidence
	// (docs/http.md, "Wipe receipts").
	Receipts *attest.ReceiptSealer
}

// Enrollment is the enrollment exchange: the challenge, the evidence, and the check of the token
// that carries the first round trip's state to the second. It records the outcome on the device
// and renders the configuration the node will fetch once (Delivery).
type Enrollment struct {
	core      *core
	catalog   Catalog
	attest    Attestation
	rnd       Random
	renderer  Renderer
	cluster   Cluster       // the workload cluster, for the bootstrap tokens of joining classes; may be nil
	refusals  *lastRefusals // the last refusal per device, which the request's end journals (Requests)
	configTTL time.Duration // how long the configuration waits for its fetch (Config.ConfigTTL)
	// joinDeadline is how long a joining node has to be Ready after its delivery
	// (Config.JoinDeadline): its token lives for configTTL plus this.
	joinDeadline time.Duration
}

// ChallengeInput is the first round trip's request, in go-attestation's types.
type ChallengeInput struct {
	ClaimedDevice     string
	ClaimedRequest    string // the request id the Workflow passed the agent (FLEETD_REQUEST)
	ClaimedTPMVersion string
	EKPublic, EKCert  []byte // DER SPKI; DER certificate or nil
	AK                goattest.AttestationParameters
}

// Challenge is the first round trip's answer.
type Challenge struct {
	Token      string
	Credential goattest.EncryptedCredential
	Nonce      []byte
}

// EvidenceInput is the second round trip's request.
type EvidenceInput struct {
	ClaimedDevice string
	Token         string
	Secret        []byte
	Platform      goattest.PlatformParameters
	LDevID        goattest.CertificationParameters
	SMBIOSUUID    string
	SMBIOSSerial  string
	Disks         []attest.Disk
	LAKBlob       []byte // the AK as the agent's TPM wrapped it (api.EvidenceRequest.LAKBlob); opaque
	// LDevIDPrivate is the LDevID key's TPM2B_PRIVATE contents (api.EvidenceRequest.LDevIDPrivate);
	// opaque. Its public area is LDevID.Public, which the certification verified.
	LDevIDPrivate []byte
	ClaimedMAC    string // the MAC the agent netbooted from (api.EvidenceRequest.MAC); "" when not sent
}

// Enrolled is the second round trip's answer: the certificates (for a provision only: an attest
// leaves the node its own, a wipe or a retirement ends the device's identity), the by-id path
// of the disk the Workflow may wipe, and a provision's fetch secret.
type Enrolled struct {
	LDevIDChain [][]byte
	LAKChain    [][]byte
	Disk        string
	// FetchSecret is a provision's one-time secret for its configuration fetch, for a class kind
	// whose install carries it (Kind.CarriesFetchSecret); NetBox holds only its hash.
	FetchSecret string
	// Receipt is a wipe's or a retirement's receipt token and nonce, for the agent's receipt
	// after the erase; nil for a provision or an attest.
	Receipt *attest.ReceiptTicket
}

// EnrollChallenge answers the first round trip: the device must have an accepted request that
// needs attestation, and it must be the request the agent's Workflow carries out (a stale
// Workflow that Tinkerbell runs late cannot enroll for a newer request: a wipe Template on an
// owner's attest); its TPM must be a 2.0 and its EK approved. The answer is a credential
// activation challenge for the claimed AK, a nonce, and the sealed token, which binds the
// evidence to the same request.
func (s *Enrollment) EnrollChallenge(ctx context.Context, in ChallengeInput) (Challenge, Outcome, error) {
	e, out, err := s.enrollingDevice(ctx, in.ClaimedDevice, "challenge")
	if err != nil {
		return Challenge{}, out, err
	}
	d, action := e.device, e.action
	if in.ClaimedRequest != d.Owned.Request {
		out.Check = "request_mismatch"
		s.core.metrics.enrollments.WithLabelValues(string(action), "challenge", out.Check).Inc()
		return Challenge{}, out, &Refusal{Class: RefusedConflict, Code: out.Check,
			Msg: "the Workflow's request is not the device's current request: this Workflow is stale and must not enroll",
			Err: fmt.Errorf("the agent named request %.64q, the device's request is %s", in.ClaimedRequest, d.Owned.Request)}
	}
	ch, err := s.challenge(d, in)
	if err != nil {
		return Challenge{}, s.enrollRefused(ctx, d, out, err, false), err
	}
	out.Result = "challenged"
	s.core.metrics.enrollments.WithLabelValues(string(action), "challenge", "ok").Inc()
	return ch, out, nil
}

func (s *Enrollment) challenge(d Device, in ChallengeInput) (Challenge, error) {
	if err := attest.RequireTPM20(in.ClaimedTPMVersion); err != nil {
		return Challenge{}, err
	}
	ek, err := s.attest.EK.Verify(in.EKPublic, in.EKCert, attest.EKApproval{SHA256: d.Declared.EKHashes, NoCertificate: d.Declared.EKCert == EKCertNone})
	if err != nil {
		return Challenge{}, err
	}
	ch, err := attest.NewAKChallenge(ek, in.AK, s.rnd)
	if err != nil {
		return Challenge{}, err
	}
	nonce, err := attest.NewNonce(s.rnd)
	if err != nil {
		return Challenge{}, err
	}
	claims := attest.TokenClaims{DeviceID: d.ID, Device: d.Name, Request: d.Owned.Request,
		EKSHA256: ek.SHA256, HWSerialNum: ek.HWSerialNum, TPMVersion: ek.TPMVersion(), AKDigest: ch.AKDigest, Secret: ch.Secret, Nonce: nonce}
	if ek.Cert != nil && ek.CertVerified {
		claims.EKIssuer, claims.TPMManufacturer = ek.Cert.Issuer.String(), ek.Manufacturer
	}
	tok, err := s.attest.Tokens.Seal(claims)
	if err != nil {
		return Challenge{}, err
	}
	return Challenge{Token: tok, Credential: ch.Credential, Nonce: nonce}, nil
}

// enrolling is a device whose request waits for its attestation: the device as NetBox has it,
// its class and the action its request carries out.
type enrolling struct {
	device Device
	class  Class
	action Action
}

// enrollingDevice finds the claimed device and checks that it has a request waiting for its
// attestation. Nothing about the device is recorded for a refusal here: the caller did not name a
// device fleetd is working on.
func (s *Enrollment) enrollingDevice(ctx context.Context, name, step string) (enrolling, Outcome, error) {
	d, out, err := s.lookupDevice(ctx, name, step)
	if err != nil {
		return enrolling{}, out, err
	}
	e := enrolling{device: d, action: RequestAction(d.Owned.Request)}
	out = outcomeFor(d, e.action, step, "refused")
	if d.Owned.State != StatePending || e.action == ActionNone {
		out.Check = "no_request"
		return e, out, Refuse(RefusedConflict, "no_request",
			"%s has no accepted request waiting for attestation (fleet_state %s): set desired_action in NetBox first",
			d.Name, stateWord(d.Owned.State))
	}
	var ok bool
	if e.class, ok = s.catalog.Class(d.Declared.Class); !ok || !e.class.Installable {
		out.Check = "class_not_installable"
		return e, out, Refuse(RefusedConflict, "class_not_installable",
			"%s's class %q is not an installable class in classes.json", d.Name, d.Declared.Class)
	}
	return e, out, nil
}

// lookupDevice reads the device a node names; an unknown name is the caller's mistake.
func (s *Enrollment) lookupDevice(ctx context.Context, name, step string) (Device, Outcome, error) {
	out := Outcome{Device: name, Step: step, Result: "refused"}
	d, err := s.core.netbox.DeviceByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		out.Check = "unknown_device"
		return Device{}, out, Refuse(RefusedNotFound, "unknown_device",
			"NetBox has no device named %.64q: the Workflow must pass the device's NetBox name", name)
	}
	if err != nil {
		return Device{}, out, fmt.Errorf("read device %.64q: %w: %w", name, ErrNetBoxUnavailable, err)
	}
	if d, err = s.core.judgedOnOwnFields(ctx, d); err != nil {
		out.Check = codeOf(err)
		return Device{}, out, err
	}
	return d, out, nil
}

// enrollRefused turns an attest refusal into fleet's. A refusal before credential activation
// (the challenge; the token or the activation of the evidence) is logged and counted and its code
// kept in memory, and nothing is written to NetBox: whoever sent it proved nothing, and a flood
// of them must not race the real machine's writes or fill the device's journal (refusals.go). A
// refusal after activation came from the TPM of an approved EK: fleet_message and a journal entry
// say why, in the check's fixed sentence (never what the caller sent), in a conditional write
// that applies only while the request is unchanged. Either way the request stays pending, so a
// stray or forged request cannot end an owner's request; the real agent exits non-zero, its
// Workflow fails, and that ends it (follow) — before anything is wiped — with the last refusal's
// sentence.
func (s *Enrollment) enrollRefused(ctx context.Context, d Device, out Outcome, err error, activated bool) Outcome {
	ar, ok := attest.AsRefusal(err)
	if !ok {
		out.Result = "error"
		return out
	}
	out.Check = string(ar.Check)
	s.core.metrics.enrollments.WithLabelValues(string(out.Action), out.Step, string(ar.Check)).Inc()
	s.refusals.note(d.ID, d.Owned.Request, string(ar.Check))
	if !activated {
		return out
	}
	msg, req := refusalSentence(d.Name, string(ar.Check)), d.Owned.Request
	d, wrote, uerr := s.core.updateIfMatch(ctx, d, func(d Device) (Patch, bool, error) {
		if d.Owned.Request != req || d.Owned.State != StatePending {
			return Patch{}, false, nil // the request moved on: its refusal is no longer news
		}
		return Patch{Message: &msg}, true, nil
	})
	if uerr != nil {
		s.core.log.Warn().Err(uerr).Str("device", d.Name).Msg("record attestation refusal")
	}
	if wrote {
		s.core.journal(ctx, d, JournalDanger, msg)
	}
	return out
}

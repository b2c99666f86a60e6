package fleet

import (
	"errors"
	"fmt"

	"github.com/folly-infra/fleetd/attest"
)

// errTokensUnwired is a wiring bug: Deps.Attest has no token sealer.
var errTokensUnwired = errors.New("enrollment is not wired: fleet.Attestation needs Tokens")

// CheckEvidenceToken authenticates the token of an evidence request as soon as the HTTP edge
// has read it, before it reads the rest of the body: a caller without a token fleetd sealed for
// the device it names costs the read of the body's first members and one AES-GCM open, and
// nothing else (docs/security.md, "Transport and abuse"). EnrollEvidence checks the token again
// (the same open) before it takes the device's lock.
func (s *Enrollment) CheckEvidenceToken(claimedDevice, claimedToken string) (Outcome, error) {
	_, out, err := s.evidenceToken(claimedDevice, claimedToken)
	return out, err
}

// evidenceToken authenticates the evidence's token before anything else of the request is looked
// at: a token fleetd did not seal, an altered or expired one, or one sealed for another device
// than the one named, is refused without a NetBox read or the device's lock. Such a refusal is
// logged and counted and writes nothing (refusals.go); an expired token is fleetd's own, so its
// claims name the device and request whose refusal it is, and it is noted for them. A token
// refused before it is authenticated names nothing: its count carries no action.
func (s *Enrollment) evidenceToken(claimedDevice, claimedToken string) (*attest.SealedToken, Outcome, error) {
	out := Outcome{Device: claimedDevice, Step: "evidence", Result: "refused"}
	if s.attest.Tokens == nil {
		out.Result = "error"
		return nil, out, errTokensUnwired
	}
	tok, err := s.attest.Tokens.Authenticate(claimedToken)
	if tok != nil {
		c := tok.Claims()
		out.DeviceID, out.Action = c.DeviceID, RequestAction(c.Request)
		if err == nil && c.Device != claimedDevice {
			err = &attest.Refusal{Check: attest.CheckTokenBinding,
				Msg: fmt.Sprintf("the token was issued to device %q, not %.64q", c.Device, claimedDevice)}
		}
	}
	if err != nil {
		ar, refused := attest.AsRefusal(err)
		if !refused {
			out.Result = "error"
			return nil, out, err
		}
		out.Check = string(ar.Check)
		s.core.metrics.enrollments.WithLabelValues(string(out.Action), out.Step, out.Check).Inc()
		if tok != nil && ar.Check == attest.CheckTokenExpired {
			s.refusals.note(tok.Claims().DeviceID, tok.Claims().Request, out.Check)
		}
		return nil, out, err
	}
	return tok, out, nil
}

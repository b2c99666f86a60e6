package handlers

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
)

// challenge serves POST /v1/attest/challenge (api.ChallengeRequest → api.ChallengeResponse).
func (s *Server) challenge(w http.ResponseWriter, r *http.Request) {
	var req api.ChallengeRequest
	if err := decodeJSON(r, &req); err != nil {
		s.nodeError(w, fleet.Outcome{Step: "challenge", Result: "refused", Check: api.CodeMalformed}, err)
		return
	}
	in := fleet.ChallengeInput{ClaimedDevice: req.Device, ClaimedRequest: req.Request, ClaimedTPMVersion: req.TPMVersion}
	if req.EK != nil {
		in.EKPublic, in.EKCert = req.EK.Public, req.EK.Certificate
	}
	if req.AK != nil {
		in.AK = req.AK.Attest()
	}
	if req.TPMVersion == attest.TPMVersion20 && (req.EK == nil || req.AK == nil) {
		s.nodeError(w, fleet.Outcome{Device: req.Device, Step: "challenge", Result: "refused", Check: api.CodeMalformed},
			fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "a TPM 2.0 challenge request needs both ek and ak"))
		return
	}
	ch, out, err := s.deps.Enrollment.EnrollChallenge(r.Context(), in)
	if err != nil {
		s.nodeError(w, out, err)
		return
	}
	s.decision(w, out, nil)
	writeJSON(w, http.StatusOK, api.ChallengeResponse{Token: ch.Token, Credential: api.NewCredential(ch.Credential), Nonce: ch.Nonce})
}

// evidence serves POST /v1/attest/evidence (api.EvidenceRequest → api.EvidenceResponse). The
// token is authenticated first, from the body's first members (readEvidenceHead), before the
// rest of the body is read.
func (s *Server) evidence(w http.ResponseWriter, r *http.Request) {
	head, err := readEvidenceHead(r.Body)
	if err != nil {
		unread(w)
		s.nodeError(w, fleet.Outcome{Step: "evidence", Result: "refused", Check: api.CodeMalformed}, err)
		return
	}
	if out, err := s.deps.Enrollment.CheckEvidenceToken(head.claimedDevice, head.claimedToken); err != nil {
		unread(w)
		s.nodeError(w, out, err)
		return
	}
	var req api.EvidenceRequest
	if err := decodeJSONFrom(io.MultiReader(bytes.NewReader(head.raw), r.Body), &req); err != nil {
		s.nodeError(w, fleet.Outcome{Step: "evidence", Result: "refused", Check: api.CodeMalformed}, err)
		return
	}
	platform, err := req.Platform.Attest()
	if err != nil {
		s.nodeError(w, fleet.Outcome{Device: req.Device, Step: "evidence", Result: "refused", Check: api.CodeMalformed},
			fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "%v", err))
		return
	}
	in := fleet.EvidenceInput{ClaimedDevice: req.Device, Token: req.Token, Secret: req.Secret, Platform: platform,
		LDevID: req.LDevID.Attest(), SMBIOSUUID: req.SMBIOS.UUID, SMBIOSSerial: req.SMBIOS.Serial, LAKBlob: req.LAKBlob, LDevIDPrivate: req.LDevIDPrivate,
		ClaimedMAC: req.MAC}
	for _, d := range req.Disks {
		in.Disks = append(in.Disks, attest.Disk{Serial: d.Serial, Path: d.Path})
	}
	res, out, err := s.deps.Enrollment.EnrollEvidence(r.Context(), in)
	if err != nil {
		s.nodeError(w, out, err)
		return
	}
	s.decision(w, out, nil)
	ans := api.EvidenceResponse{LDevIDChain: res.LDevIDChain, LAKChain: res.LAKChain, Disk: res.Disk, FetchSecret: res.FetchSecret}
	if res.Receipt != nil {
		ans.Receipt = &api.ReceiptGrant{Token: res.Receipt.Token, Nonce: res.Receipt.Nonce}
	}
	writeJSON(w, http.StatusOK, ans)
}

// nodeError logs the decision line of a refused or failed node request and answers it. A node
// is told the refusal's code and its fixed sentence (fleet.PublicSentence), never the message
// that names the values: those can be what the caller sent, or the device's declaration
// (docs/security.md, "Claimed input"); they go to the log only.
func (s *Server) nodeError(w http.ResponseWriter, out fleet.Outcome, err error) {
	r, refused := fleet.AsRefusal(err)
	if refused && out.Check == "" {
		out.Check = r.Code
	}
	s.decision(w, out, err)
	if refused {
		writeJSON(w, statusOf(r.Class), api.Error{Code: r.Code, Message: fleet.PublicSentence(r.Code)})
		return
	}
	writeError(w, s.log(w), err)
}

// maxReason caps the reason in a decision line: a refusal's message can quote what the caller sent.
const maxReason = 2048

// decision writes the request's one decision line (docs/operate.md, "Endpoints").
func (s *Server) decision(w http.ResponseWriter, out fleet.Outcome, err error) {
	log := s.log(w)
	ev := log.Info()
	if _, refused := fleet.AsRefusal(err); err != nil && !refused {
		ev = log.Error().Err(err)
	} else if err != nil {
		reason := err.Error()
		if len(reason) > maxReason {
			reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
		}
		ev = log.Warn().Str("reason", reason)
	}
	ev.EmbedObject(out).Msg("decision")
}

// unread closes the connection after the answer to a request whose body is refused unread: Go's
// server would otherwise read up to 256 KiB more of it to keep the connection, which is the cost
// the refusal spares.
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

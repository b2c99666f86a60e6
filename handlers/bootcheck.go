package handlers

import (
	"net/http"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
)

// bootCheckNonce serves POST /v1/boot-check/nonce (no body → api.BootCheckNonce).
func (s *Server) bootCheckNonce(w http.ResponseWriter, r *http.Request) {
	n, out, err := s.deps.BootChecks.BootCheckNonce()
	if err != nil {
		s.nodeError(w, out, err)
		return
	}
	log := s.log(w)
	log.Debug().EmbedObject(out).Msg("decision") // one per check; the check's own line is at info
	writeJSON(w, http.StatusOK, api.BootCheckNonce{Nonce: n.Nonce, Token: n.Token, ExpiresAt: n.ExpiresAt})
}

// bootCheck serves POST /v1/boot-check (api.BootCheckRequest → api.BootCheckResponse).
func (s *Server) bootCheck(w http.ResponseWriter, r *http.Request) {
	var req api.BootCheckRequest
	if err := decodeJSON(r, &req); err != nil {
		s.nodeError(w, fleet.Outcome{Step: "boot-check", Result: "refused", Check: api.CodeMalformed}, err)
		return
	}
	platform, err := req.Platform.Attest()
	if err != nil {
		s.nodeError(w, fleet.Outcome{Step: "boot-check", Result: "refused", Check: api.CodeMalformed},
			fleet.Refuse(fleet.RefusedInvalid, api.CodeMalformed, "%v", err))
		return
	}
	in := fleet.BootCheckInput{Token: req.Token, LAKChain: req.LAKChain, Platform: platform}
	if req.LDevID != nil {
		in.LDevID = &fleet.LDevIDProof{Chain: req.LDevID.Chain, Certification: req.LDevID.Certification.Attest()}
	}
	if req.Claimed != nil {
		in.Claimed = &fleet.ClaimedHardware{SMBIOSUUID: req.Claimed.SMBIOS.UUID, MAC: req.Claimed.MAC}
		for _, d := range req.Claimed.Disks {
			in.Claimed.Disks = append(in.Claimed.Disks, attest.Disk{Serial: d.Serial, Path: d.Path})
		}
	}
	res, out, err := s.deps.BootChecks.BootCheck(r.Context(), in)
	if err != nil {
		s.nodeError(w, out, err)
		return
	}
	s.decision(w, out, nil)
	writeJSON(w, http.StatusOK, api.BootCheckResponse{Device: res.Device, Outcome: string(res.Outcome), BaselineTaken: res.BaselineTaken,
		Changes: res.Changes, SecureBoot: res.SecureBoot, CheckedAt: res.CheckedAt, Renewal: renewal(res.Renewal)})
}

// renewal is the answer's account of a renewal, nil when the check had none.
func renewal(r fleet.Renewed) *api.Renewal {
	if !r.Any() {
		return nil
	}
	out := &api.Renewal{Refused: r.Refused, Message: r.Message}
	if r.LDevID != nil {
		out.LDevIDChain = r.LDevID.DER()
	}
	if r.LAK != nil {
		out.LAKChain = r.LAK.DER()
	}
	return out
}

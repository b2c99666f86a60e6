package agent_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// fleetdStub is fleetd's enrollment routes wired with attest and pki directly (no NetBox, no
// lifecycle): the same checks in the same order as the real handlers, over HTTP.
type fleetdStub struct {
	t       testing.TB
	ek      *attest.EKVerifier
	sealer  *attest.TokenSealer
	issuer  *pki.Issuer
	devid   *pki.CA
	lak     *pki.CA
	devices map[string]stubDevice

	mu        sync.Mutex
	calls     map[string]int              // attempts per path
	failNext  map[string]int              // answer this many attempts of a path with 503 first
	limitNext map[string]int              // then this many with 429 and Retry-After: 0 (fleetd's rate limit)
	mangle    func(*api.EvidenceResponse) // changes a successful evidence answer (a misbehaving fleetd)
	lakBlob   []byte                      // the lak_blob of the last evidence request
}

// sentLAKBlob is the lak_blob the last evidence request carried.
func (s *fleetdStub) sentLAKBlob() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lakBlob
}

// stubRequest is every stub device's current request, which the agent must name.
const stubRequest = "provision-k3f9x2mq"

type stubDevice struct {
	id         int64
	request    string
	ekHashes   []string
	diskSerial string
	secureBoot bool
}

func newFleetdStub(t testing.TB, policy attest.EKPolicy, bundle []byte) (*fleetdStub, *httptest.Server) {
	t.Helper()
	now := time.Now
	ekv, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: policy, BundlePEM: bundle, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := attest.NewTokenSealer(attest.TokenConfig{Key: bytes.Repeat([]byte{3}, 32), Lifetime: time.Minute, Rand: rand.Reader, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	s := &fleetdStub{t: t, ek: ekv, sealer: sealer, devices: map[string]stubDevice{},
		calls: map[string]int{}, failNext: map[string]int{}, limitNext: map[string]int{}}
	if s.devid, _, err = pki.NewCA(pki.NewCAConfig{Name: "fleetd DevID", Rand: rand.Reader, Now: now}); err != nil {
		t.Fatal(err)
	}
	if s.lak, _, err = pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Rand: rand.Reader, Now: now}); err != nil {
		t.Fatal(err)
	}
	if s.issuer, err = pki.NewIssuer(pki.IssuerConfig{LDevID: s.devid, LAK: s.lak, LDevIDLifetime: time.Hour,
		LAKLifetime: time.Hour, Rand: rand.Reader, Now: now}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathAttestChallenge, s.wrap(api.PathAttestChallenge, s.challenge))
	mux.HandleFunc("POST "+api.PathAttestEvidence, s.wrap(api.PathAttestEvidence, s.evidence))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *fleetdStub) attempts(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[path]
}

// wrap counts attempts, injects failures and encodes answers and refusals.
func (s *fleetdStub) wrap(path string, h func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls[path]++
		fail := s.failNext[path] > 0
		if fail {
			s.failNext[path]--
		}
		limit := !fail && s.limitNext[path] > 0
		if limit {
			s.limitNext[path]--
		}
		s.mu.Unlock()
		if limit {
			w.Header().Set("Retry-After", "0")
			writeJSON(w, http.StatusTooManyRequests, api.Error{Code: "rate_limited", Message: "too many requests; retry after the Retry-After seconds"})
			return
		}
		if fail {
			writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: "netbox_unavailable", Message: "fleetd could not reach NetBox; retry shortly"})
			return
		}
		out, err := h(r)
		if res, ok := out.(api.EvidenceResponse); ok && s.mangle != nil {
			s.mangle(&res)
			out = res
		}
		if ref, ok := attest.AsRefusal(err); ok {
			writeJSON(w, http.StatusForbidden, api.Error{Code: string(ref.Check), Message: ref.Msg})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeMalformed, Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *fleetdStub) challenge(r *http.Request) (any, error) {
	var req api.ChallengeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return nil, err
	}
	d, ok := s.devices[req.Device]
	if !ok {
		return nil, errors.New("unknown device")
	}
	if req.Request != d.request {
		return nil, fmt.Errorf("the agent named request %q, the device's is %q", req.Request, d.request)
	}
	if err := attest.RequireTPM20(req.TPMVersion); err != nil {
		return nil, err
	}
	ek, err := s.ek.Verify(req.EK.Public, req.EK.Certificate, attest.EKApproval{SHA256: d.ekHashes})
	if err != nil {
		return nil, err
	}
	ch, err := attest.NewAKChallenge(ek, req.AK.Attest(), rand.Reader)
	if err != nil {
		return nil, err
	}
	nonce, err := attest.NewNonce(rand.Reader)
	if err != nil {
		return nil, err
	}
	tok, err := s.sealer.Seal(attest.TokenClaims{DeviceID: d.id, Device: req.Device, EKSHA256: ek.SHA256,
		HWSerialNum: ek.HWSerialNum, AKDigest: ch.AKDigest, Secret: ch.Secret, Nonce: nonce})
	if err != nil {
		return nil, err
	}
	return api.ChallengeResponse{Token: tok, Credential: api.NewCredential(ch.Credential), Nonce: nonce}, nil
}

func (s *fleetdStub) evidence(r *http.Request) (any, error) {
	var req api.EvidenceRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.lakBlob = req.LAKBlob
	s.mu.Unlock()
	d := s.devices[req.Device]
	tok, err := s.sealer.Open(req.Token, attest.Binding{DeviceID: d.id, Device: req.Device, ApprovedEKs: d.ekHashes,
		ClaimedAKPublic: req.Platform.AKPublic})
	if err != nil {
		return nil, err
	}
	ak, err := attest.VerifyActivation(tok, req.Secret, req.Platform.AKPublic)
	if err != nil {
		return nil, err
	}
	pp, err := req.Platform.Attest()
	if err != nil {
		return nil, err
	}
	nonce := tok.Claims().Nonce
	boot, err := attest.VerifyPlatform(ak, nonce, pp)
	if err != nil {
		return nil, err
	}
	if err := attest.RequireSecureBoot(boot, d.secureBoot); err != nil {
		return nil, err
	}
	key, err := attest.VerifyLDevIDKey(ak, nonce, req.LDevID.Attest())
	if err != nil {
		return nil, err
	}
	claimed := make([]attest.Disk, len(req.Disks))
	for i, x := range req.Disks {
		claimed[i] = attest.Disk{Serial: x.Serial, Path: x.Path}
	}
	disk, err := attest.MatchDisk(d.diskSerial, claimed)
	if err != nil {
		return nil, err
	}
	id := pki.Identity{DeviceName: req.Device, DeviceSerial: req.SMBIOS.Serial, HWSerialNum: tok.Claims().HWSerialNum}
	ldevid, err := s.issuer.IssueLDevID(id, key.Public)
	if err != nil {
		return nil, err
	}
	lak, err := s.issuer.IssueLAK(id, ak.Public)
	if err != nil {
		return nil, err
	}
	return api.EvidenceResponse{LDevIDChain: ldevid.DER(), LAKChain: lak.DER(), Disk: disk.Path}, nil
}

package attest_test

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// verifier is fleetd's side of an enrollment: the real handlers and fleet service on in-memory
// NetBox (handlers/handlerstest), reached over HTTP with the wire types the agent sends (package
// api). Every row of these tests goes through the route, the service's checks in the service's
// order, and its NetBox writes: no stand-in of the enrollment decides here.
type verifier struct {
	f     *handlerstest.Fleetd // the fleetd the next round trip goes to
	cfg   handlerstest.Config  // how f was made; a row that needs another fleetd starts one from it
	clock *clock
}

// The classes the scenarios' devices have: one that accepts any boot, one that requires Secure Boot.
const (
	classAny        = "talos-worker"
	classSecureBoot = "talos-worker-secure-boot"
)

// The devices' NetBox ids and their current request.
const (
	idNodeA, idNodeB = 1, 2
	requestID        = "provision-k3f9x2mq"
)

// challengeClaim is the first round trip's request; evidenceClaim the second's.
type challengeClaim struct {
	device, request, tpmVersion string
	ekPub, ekCert               []byte
	ak                          ga.AttestationParameters
}

type evidenceClaim struct {
	device, token string
	secret        []byte
	platform      ga.PlatformParameters
	ldevid        ga.CertificationParameters
	ldevidPrivate []byte
	lakBlob       []byte
	disks         []attest.Disk
}

type challengeAnswer struct {
	token string
	ec    ga.EncryptedCredential
	nonce []byte
}

// evidenceAnswer is what an accepted enrollment answered: the leaves it issued and the disk it
// authorized.
type evidenceAnswer struct {
	ldevid, lak *x509.Certificate
	disk        string
}

// refused is a 4xx answer: the status and the api.Error body.
type refused struct {
	status int
	body   api.Error
}

func (r *refused) Error() string { return fmt.Sprintf("%d %s", r.status, r.body.Error()) }

// newVerifier starts a fleetd under the EK policy, with the scenarios' classes and a clock the
// rows can move; newScenario declares its devices.
func newVerifier(t testing.TB, policy attest.EKPolicy, bundle []byte) *verifier {
	t.Helper()
	c := &clock{testTime}
	base, _ := fleettest.Catalog().Class(classAny)
	sb := base
	sb.Name, sb.SecureBoot = classSecureBoot, fleet.SecureBootRequired
	cfg := handlerstest.Config{Catalog: fleet.NewCatalog(base, sb), EKPolicy: policy, EKBundle: bundle,
		TokenLifetime: 10 * time.Minute, Now: c.Now}
	return &verifier{f: handlerstest.New(t, cfg), cfg: cfg, clock: c}
}

// declare puts the scenario's devices into NetBox: node-a, whose approved EKs are another's and
// the machine's, and node-b, which approves the same EK; both wait for the machine's attestation.
func (v *verifier) declare(ekSHA256 string, secureBoot bool) {
	for _, d := range []struct {
		id     int64
		name   string
		ekHash []string
	}{{idNodeA, "node-a", []string{"00" + ekSHA256[2:], ekSHA256}}, {idNodeB, "node-b", []string{ekSHA256}}} {
		dev := fleettest.Declared(d.id, d.name)
		dev.Declared.EKHashes, dev.Declared.DiskSerial = d.ekHash, disks[0].Serial
		if secureBoot {
			dev.Declared.Class = classSecureBoot
		}
		dev.Status = fleet.StatusStaged
		dev.Owned = fleet.Owned{State: fleet.StatePending, Request: requestID, Workflow: fleet.WorkflowName(d.name, requestID)}
		v.f.Inv.Set(dev)
	}
}

// edit changes a device in the NetBox of the fleetd the next round trip goes to (an owner's edit
// between the two round trips).
func (v *verifier) edit(id int64, change func(*fleet.Device)) {
	d := v.f.Inv.Get(id)
	change(&d)
	v.f.Inv.Set(d)
}

// another starts a second fleetd made as this one with change applied, holding the same devices,
// and sends the next round trips there.
func (v *verifier) another(t testing.TB, change func(*handlerstest.Config)) {
	t.Helper()
	cfg := v.cfg
	cfg.TalosSecrets = v.f.TalosSecrets // one fleet's
	change(&cfg)
	other := handlerstest.New(t, cfg)
	for _, id := range []int64{idNodeA, idNodeB} {
		other.Inv.Set(v.f.Inv.Get(id))
	}
	v.f, v.cfg = other, cfg
}

func (v *verifier) challenge(c challengeClaim) (*challengeAnswer, error) {
	req := api.ChallengeRequest{Device: c.device, Request: c.request, TPMVersion: c.tpmVersion,
		EK: &api.EK{Public: c.ekPub, Certificate: c.ekCert}, AK: api.NewAKParams(c.ak)}
	var res api.ChallengeResponse
	if err := v.post(api.PathAttestChallenge, req, &res); err != nil {
		return nil, err
	}
	return &challengeAnswer{token: res.Token, ec: res.Credential.Attest(), nonce: res.Nonce}, nil
}

func (v *verifier) evidence(c evidenceClaim) (*evidenceAnswer, error) {
	req := api.EvidenceRequest{Device: c.device, Token: c.token, Secret: c.secret, Platform: api.NewPlatform(&c.platform),
		LDevID: api.NewCertification(c.ldevid), SMBIOS: api.SMBIOS{UUID: "4c4c4544-0042-3510-8052-b4c04f4e3232", Serial: "SN-1"},
		LAKBlob: c.lakBlob, LDevIDPrivate: c.ldevidPrivate}
	for _, d := range c.disks {
		req.Disks = append(req.Disks, api.Disk{Serial: d.Serial, Path: d.Path})
	}
	var res api.EvidenceResponse
	if err := v.post(api.PathAttestEvidence, req, &res); err != nil {
		return nil, err
	}
	a := &evidenceAnswer{disk: res.Disk}
	for _, chain := range []struct {
		der  [][]byte
		leaf **x509.Certificate
	}{{res.LDevIDChain, &a.ldevid}, {res.LAKChain, &a.lak}} {
		if len(chain.der) == 0 {
			continue
		}
		leaf, err := x509.ParseCertificate(chain.der[0])
		if err != nil {
			return nil, fmt.Errorf("parse the issued leaf: %w", err)
		}
		*chain.leaf = leaf
	}
	return a, nil
}

// post sends one round trip. A 4xx is a *refused; anything else but a 200 is fleetd's failure.
func (v *verifier) post(path string, req, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := http.Post(v.f.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return json.Unmarshal(raw, res)
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		r := &refused{status: resp.StatusCode}
		if err := json.Unmarshal(raw, &r.body); err != nil {
			return fmt.Errorf("%s answered %d with a body that is no api.Error: %q", path, resp.StatusCode, raw)
		}
		return r
	}
	return fmt.Errorf("%s answered %d: %q", path, resp.StatusCode, raw)
}

// asRefused is err's refusal, or ok false when err is none.
func asRefused(err error) (*refused, bool) {
	var r *refused
	return r, errors.As(err, &r)
}

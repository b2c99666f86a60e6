package attest_test

import (
	"bytes"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// verifier is fleetd's side of an enrollment as the handlers will run it: attest's checks in
// order, then pki's issuing. It stands in for fleet/ and handlers/ in these tests.
type verifier struct {
	ek      *attest.EKVerifier
	sealer  *attest.TokenSealer
	issuer  *pki.Issuer
	clock   *clock
	devices map[string]device
}

type device struct {
	id         int64
	ekHashes   []string
	diskSerial string
	secureBoot bool
}

// challengeClaim is the first round trip's request; evidenceClaim the second's.
type challengeClaim struct {
	device, tpmVersion string
	ekPub, ekCert      []byte
	ak                 ga.AttestationParameters
}

type evidenceClaim struct {
	device, token string
	secret        []byte
	platform      ga.PlatformParameters
	ldevid        ga.CertificationParameters
	disks         []attest.Disk
}

type challengeAnswer struct {
	token string
	ec    ga.EncryptedCredential
	nonce []byte
}

type evidenceAnswer struct {
	ldevid, lak *pki.Certificate
	disk        *attest.VerifiedDisk
	boot        *attest.VerifiedBoot
}

func newVerifier(t testing.TB, policy attest.EKPolicy, bundle []byte) *verifier {
	t.Helper()
	c := &clock{testTime}
	ekv, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: policy, BundlePEM: bundle, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := attest.NewTokenSealer(attest.TokenConfig{Key: bytes.Repeat([]byte{7}, 32),
		Lifetime: 10 * time.Minute, Rand: seeded(9), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	devid, _, err := pki.NewCA(pki.NewCAConfig{Name: "fleetd DevID", Rand: seeded(10), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	lak, _, err := pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Rand: seeded(11), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: devid, LAK: lak, LDevIDLifetime: 24 * time.Hour,
		LAKLifetime: 24 * time.Hour, Rand: seeded(12), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &verifier{ek: ekv, sealer: sealer, issuer: iss, clock: c, devices: map[string]device{}}
}

func (v *verifier) challenge(c challengeClaim) (*challengeAnswer, error) {
	d := v.devices[c.device]
	if err := attest.RequireTPM20(c.tpmVersion); err != nil {
		return nil, err
	}
	ek, err := v.ek.Verify(c.ekPub, c.ekCert, attest.EKApproval{SHA256: d.ekHashes})
	if err != nil {
		return nil, err
	}
	ch, err := attest.NewAKChallenge(ek, c.ak, seeded(13))
	if err != nil {
		return nil, err
	}
	nonce, err := attest.NewNonce(seeded(14))
	if err != nil {
		return nil, err
	}
	tok, err := v.sealer.Seal(attest.TokenClaims{DeviceID: d.id, Device: c.device, Request: "provision-abc",
		EKSHA256: ek.SHA256, HWSerialNum: ek.HWSerialNum, AKDigest: ch.AKDigest, Secret: ch.Secret, Nonce: nonce})
	if err != nil {
		return nil, err
	}
	return &challengeAnswer{token: tok, ec: ch.Credential, nonce: nonce}, nil
}

func (v *verifier) evidence(c evidenceClaim) (*evidenceAnswer, error) {
	d := v.devices[c.device]
	tok, err := v.sealer.Open(c.token, attest.Binding{DeviceID: d.id, Device: c.device,
		ApprovedEKs: d.ekHashes, ClaimedAKPublic: c.platform.Public})
	if err != nil {
		return nil, err
	}
	ak, err := attest.VerifyActivation(tok, c.secret, c.platform.Public)
	if err != nil {
		return nil, err
	}
	nonce := tok.Claims().Nonce
	boot, err := attest.VerifyPlatform(ak, nonce, c.platform)
	if err != nil {
		return nil, err
	}
	if err := attest.RequireSecureBoot(boot, d.secureBoot); err != nil {
		return nil, err
	}
	key, err := attest.VerifyLDevIDKey(ak, nonce, c.ldevid)
	if err != nil {
		return nil, err
	}
	disk, err := attest.MatchDisk(d.diskSerial, c.disks)
	if err != nil {
		return nil, err
	}
	id := pki.Identity{DeviceName: c.device, DeviceSerial: "SN-1", HWSerialNum: tok.Claims().HWSerialNum}
	ldevid, err := v.issuer.IssueLDevID(id, key.Public)
	if err != nil {
		return nil, err
	}
	lak, err := v.issuer.IssueLAK(id, ak.Public)
	if err != nil {
		return nil, err
	}
	return &evidenceAnswer{ldevid: ldevid, lak: lak, disk: disk, boot: boot}, nil
}

package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent/tpmconn"
	"github.com/folly-infra/fleetd/api"
)

// Enroll runs `fleetd enroll` (docs/design.md §1 step 3, §4): it proves with the machine's TPM that it
// holds an approved EK, sends its measured boot, its SMBIOS identity and its disks, and writes
// what fleetd answers into the Workflow directory for the later actions (see files.go). It
// returns nil when every file is written; otherwise an error whose type ExitCode maps to the
// process's exit code (*UsageError, *RefusedError, *FleetdError, *TPMError, or another for a
// local failure). Nothing is written unless fleetd accepted the machine, and a disk file left by
// an earlier run is removed first, so a failed enrollment never authorizes a wipe.
func Enroll(ctx context.Context, cfg EnrollConfig) error {
	cfg, cfgErr := cfg.withDefaults()
	if err := clearDisk(cfg.WorkflowDir); err != nil {
		return err
	}
	if cfgErr != nil {
		return cfgErr
	}
	e := &enrollment{
		cfg:    cfg,
		log:    cfg.Log.With().Str("device", cfg.Device).Logger(),
		client: cfg.Conn.client(cfg.Log.With().Str("device", cfg.Device).Logger()),
	}
	ch := cfg.Channel
	var err error
	if ch == nil {
		if v := tpmconn.DetectVersion(cfg.TPM, filepath.Join(cfg.SysRoot, "class", "tpm")); v != tpmconn.Version20 {
			return e.reportNoTPM20(ctx, v)
		}
		if ch, err = tpmconn.Open(cfg.TPM, cfg.EventLog); err != nil {
			return &TPMError{Op: "open TPM", Err: err}
		}
	}
	tpm, err := OpenTPM(ch)
	if err != nil {
		_ = ch.Close()
		return &TPMError{Op: "open TPM", Err: err}
	}
	defer tpm.Close()
	return e.run(ctx, tpm)
}

// clearDisk removes the disk authorization, the fetch secret and the receipt's files an earlier
// run left (a stale wipe report is never quoted for this run's receipt), and makes sure the
// directory exists.
func clearDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("prepare the workflow directory: %w", err)
	}
	for _, name := range []string{FileDisk, FileFetchSecret, FileReceipt, FileReceiptAK, FileWipeResult} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the previous run's %s: %w", name, err)
		}
	}
	return nil
}

type enrollment struct {
	cfg    EnrollConfig
	log    zerolog.Logger
	client *client
}

// reportNoTPM20 tells fleetd the machine has no TPM 2.0, so that fleetd records the reason
// (docs/design.md §1: a TPM the agent finds to be 1.2 is refused at attestation), and returns its refusal.
func (e *enrollment) reportNoTPM20(ctx context.Context, v tpmconn.Version) error {
	e.log.Warn().Str("step", "tpm").Str("tpm_version", string(v)).Msg("no TPM 2.0 on this machine")
	var resp api.ChallengeResponse
	err := e.client.post(ctx, api.PathAttestChallenge, api.ChallengeRequest{Device: e.cfg.Device, Request: e.cfg.Request, TPMVersion: string(v)}, &resp)
	if err == nil {
		return &FleetdError{Op: "report the TPM version", Err: fmt.Errorf("fleetd accepted TPM version %q", v)}
	}
	return err
}

// run is the enrollment proper, on an open TPM 2.0.
func (e *enrollment) run(ctx context.Context, tpm *TPM) error {
	// Step 1: the EK and a fresh AK.
	ekPub, ekCert, err := tpm.EK()
	if err != nil {
		return &TPMError{Op: "read EK", Err: err}
	}
	ak, err := tpm.NewAK()
	if err != nil {
		return &TPMError{Op: "create AK", Err: err}
	}
	defer ak.Close(tpm.Attest())

	// Step 2: the challenge round trip.
	var ch api.ChallengeResponse
	req := api.ChallengeRequest{Device: e.cfg.Device, Request: e.cfg.Request, TPMVersion: string(tpmconn.Version20),
		EK: &api.EK{Public: ekPub, Certificate: ekCert}, AK: api.NewAKParams(ak.AttestationParameters())}
	if err := e.client.post(ctx, api.PathAttestChallenge, req, &ch); err != nil {
		return err
	}
	e.log.Info().Str("step", "challenge").Str("outcome", "ok").Msg("fleetd approved the EK and sent a challenge")

	// Step 3: the TPM's answers: the activated secret, the quotes, a new LDevID key.
	ev, ld, err := e.answer(tpm, ak, ch)
	if err != nil {
		return err
	}

	// Step 4: the machine's identity and disks.
	hw := Hardware{SysRoot: e.cfg.SysRoot, DevRoot: e.cfg.DevRoot, RouteFile: e.cfg.RouteFile, MAC: e.cfg.MAC}
	claims, err := hw.claims(e.log)
	if err != nil {
		return err
	}
	ev.SMBIOS, ev.Disks, ev.MAC = claims.SMBIOS, claims.Disks, claims.MAC

	// Step 5: the evidence round trip.
	var res api.EvidenceResponse
	if err := e.client.post(ctx, api.PathAttestEvidence, ev, &res); err != nil {
		return err
	}
	e.log.Info().Str("step", "evidence").Str("outcome", "ok").Str("disk", res.Disk).Msg("fleetd accepted the evidence")

	// Step 6: check the answer against what this machine sent, then write the files.
	return e.write(res, ld, ak, ev.LAKBlob, ev.Disks)
}

// answer runs the TPM operations the challenge asks for.
func (e *enrollment) answer(tpm *TPM, ak *attest.AK, ch api.ChallengeResponse) (*api.EvidenceRequest, *LDevIDKey, error) {
	secret, err := tpm.ActivateCredential(ak, ch.Credential.Attest())
	if err != nil {
		return nil, nil, &TPMError{Op: "activate credential", Err: err}
	}
	pp, err := tpm.AttestPlatform(ak, ch.Nonce, nil)
	if err != nil {
		return nil, nil, &TPMError{Op: "attest platform", Err: err}
	}
	ld, err := tpm.NewLDevID(ak, ch.Nonce)
	if err != nil {
		return nil, nil, &TPMError{Op: "create LDevID", Err: err}
	}
	// The AK's blob goes to fleetd too: a provision delivers it to the installed node in its
	// configuration, with the LAK certificate (HookOS's shared directory does not survive the reboot).
	blob, err := ak.Marshal()
	if err != nil {
		return nil, nil, &TPMError{Op: "marshal AK", Err: err}
	}
	ev := &api.EvidenceRequest{Device: e.cfg.Device, Token: ch.Token, Secret: secret,
		Platform: api.NewPlatform(pp), LDevID: api.NewCertification(ld.Certification), LAKBlob: blob, LDevIDPrivate: ld.Private}
	return ev, ld, nil
}

// write checks fleetd's answer and writes the files, the disk authorization last. Only a
// provision issues certificates: an attest leaves the node its LDevID and LAK, and a wipe or a
// retirement ends the device's identity, so for them only the disk authorization is written,
// and for a wipe or a retirement the receipt grant and the AK's blob before it (receipt.go).
// blob is the AK's blob sent with the evidence, written as lak.blob.
func (e *enrollment) write(res api.EvidenceResponse, ld *LDevIDKey, ak *attest.AK, blob []byte, disks []api.Disk) error {
	if !slices.ContainsFunc(disks, func(d api.Disk) bool { return d.Path == res.Disk }) {
		return &FleetdError{Op: "check the disk", Err: fmt.Errorf("fleetd authorized %q, which is not a disk this machine reported", res.Disk)}
	}
	if len(res.LDevIDChain) == 0 && len(res.LAKChain) == 0 {
		var files []workflowFile
		if res.Receipt != nil {
			var err error
			if files, err = receiptFiles(e.cfg, res.Receipt, blob); err != nil {
				return err
			}
		}
		files = append(files, workflowFile{FileDisk, []byte(res.Disk + "\n"), 0o644}) // last: the wipe action waits for it
		for _, f := range files {
			if err := writeFile(e.cfg.WorkflowDir, f.name, f.data, f.mode); err != nil {
				return err
			}
		}
		e.log.Info().Str("step", "write").Str("outcome", "ok").Str("dir", e.cfg.WorkflowDir).Bool("receipt", res.Receipt != nil).
			Msg("attested; no certificates (attest, wipe or retirement)")
		return nil
	}
	ldPub, err := tpm2.DecodePublic(ld.Public)
	if err != nil {
		return fmt.Errorf("decode the LDevID public area: %w", err)
	}
	ldKey, err := ldPub.Key()
	if err != nil {
		return fmt.Errorf("decode the LDevID public key: %w", err)
	}
	ldevidPEM, err := chainPEM(res.LDevIDChain, ldKey)
	if err != nil {
		return &FleetdError{Op: "check the LDevID certificate", Err: err}
	}
	lakPEM, err := chainPEM(res.LAKChain, ak.Public())
	if err != nil {
		return &FleetdError{Op: "check the LAK certificate", Err: err}
	}
	files := []workflowFile{
		{FileLDevIDCert, ldevidPEM, 0o644}, {FileLDevIDPub, ld.Public, 0o644}, {FileLDevIDPriv, ld.Private, 0o600},
		{FileLAKCert, lakPEM, 0o644}, {FileLAKBlob, blob, 0o600},
	}
	if res.FetchSecret != "" {
		files = append(files, workflowFile{FileFetchSecret, []byte(res.FetchSecret + "\n"), 0o600})
	}
	files = append(files, workflowFile{FileDisk, []byte(res.Disk + "\n"), 0o644}) // last: the install's actions wait for it
	for _, f := range files {
		if err := writeFile(e.cfg.WorkflowDir, f.name, f.data, f.mode); err != nil {
			return err
		}
	}
	e.log.Info().Str("step", "write").Str("outcome", "ok").Str("dir", e.cfg.WorkflowDir).Msg("enrolled")
	return nil
}

// workflowFile is one file the agent writes into the Workflow's shared directory.
type workflowFile struct {
	name string
	data []byte
	mode os.FileMode
}

// chainPEM checks that a chain's leaf certifies key and encodes the chain as PEM, leaf first.
func chainPEM(chain [][]byte, key crypto.PublicKey) ([]byte, error) {
	if len(chain) == 0 {
		return nil, errors.New("fleetd sent no certificate")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, fmt.Errorf("parse the leaf: %w", err)
	}
	if k, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(key) {
		return nil, fmt.Errorf("the certificate (serial %x) is not for this machine's key", leaf.SerialNumber)
	}
	var out []byte
	for i, der := range chain {
		if _, err := x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("parse certificate %d of the chain: %w", i, err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out, nil
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent/tpmconn"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/pki"
)

// BootCheck runs `fleetd boot-check` (docs/design.md §5), the node's hourly check, from a systemd timer, a
// cron job or a Kubernetes CronJob: it reloads the AK the enrollment left (lak.blob), asks fleetd
// for a nonce, quotes the PCRs over it, and sends the SHA-256 bank's quote, the event log and the
// LAK certificate (lak.pem). When the node has its LDevID (ldevid.pem, ldevid.pub, ldevid.priv) the
// AK also certifies the LDevID key over the same nonce, so fleetd can renew it. Certificates
// fleetd renewed in its answer replace ldevid.pem and lak.pem atomically (renew.go). It returns
// nil when fleetd recorded the boot as ok, a *DriftError when fleetd recorded drift, a
// *NotRenewedError when a due certificate was not renewed, and otherwise an error whose type
// ExitCode maps to the exit code (*UsageError, *RefusedError, *FleetdError, *TPMError, or another
// for a local failure).
//
// Before the check it installs the LDevID files a Talos config delivered in their text form and
// the node directory does not hold yet (InstallDelivered). With InstallOnly it stops after that,
// without the TPM or fleetd, and a failure to install is its error (exit 1): SPIRE's agent pod
// runs it so before the agent starts (deploy/kubernetes/spire-agent-daemonset.yaml). In a check,
// a failure to install is logged and the check goes on: the files are SPIRE's, not the check's,
// and the hourly CronJob mounts the node directory read-only.
func BootCheck(ctx context.Context, cfg BootCheckConfig) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	log := cfg.Log.With().Str("step", "boot-check").Logger()
	installed, err := InstallDelivered(cfg.Dir)
	switch {
	case err != nil && cfg.InstallOnly:
		return err
	case err != nil:
		log.Error().Err(err).Str("dir", cfg.Dir).Msg("the LDevID files for SPIRE are not installed; the boot check goes on")
	case len(installed) > 0:
		log.Info().Str("dir", cfg.Dir).Strs("files", installed).Msg("installed the LDevID files from their delivered text form")
	}
	if cfg.InstallOnly {
		return nil
	}
	chain, blob, err := readLAK(cfg.Dir)
	if err != nil {
		return err
	}
	ch := cfg.Channel
	if ch == nil {
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
	ld, err := readLDevID(cfg.Dir)
	if err != nil {
		return err
	}
	c := cfg.Conn.client(log)
	var claimed *api.BootCheckClaims
	if cl, err := cfg.Hardware.claims(log); err != nil {
		log.Warn().Err(err).Msg("the machine's disks or SMBIOS identity cannot be read: the check claims nothing, and fleetd keeps the claimed facts it has")
	} else {
		claimed = &cl
	}
	res, err := bootCheck(ctx, log, tpm, c, chain, blob, ld, claimed)
	if refused := (*RefusedError)(nil); errors.As(err, &refused) && refused.Code == codeReplayed {
		// The nonce was fresh, so an earlier attempt of this same check was recorded and its
		// answer lost (fleetd killed or the connection cut after its NetBox write), and the
		// retry was refused as its replay: the check is made once more, from a new nonce.
		log.Warn().Str("code", refused.Code).Msg("an attempt of this check was recorded and its answer lost; checking again with a new nonce")
		res, err = bootCheck(ctx, log, tpm, c, chain, blob, ld, claimed)
	}
	if err != nil {
		return err
	}
	if err := installRenewal(cfg.Install, cfg.Dir, res.Renewal, blob, ld); err != nil {
		return err
	}
	return report(log, res)
}

// codeReplayed is fleetd's refusal of a check whose nonce was issued before the device's last
// accepted check (fleet.bootCheckAllowed).
const codeReplayed = "replayed"

// bootCheck is the check proper, on an open TPM.
func bootCheck(ctx context.Context, log zerolog.Logger, tpm *TPM, c *client, chain [][]byte, blob []byte, ld *ldevidFiles, claimed *api.BootCheckClaims) (*api.BootCheckResponse, error) {
	// Step 1: the AK, which must be the key lak.pem certifies.
	ak, err := tpm.Attest().LoadAK(blob)
	if err != nil {
		return nil, &TPMError{Op: "load the AK from " + FileLAKBlob, Err: err}
	}
	closeAK := sync.OnceValue(func() error { return ak.Close(tpm.Attest()) })
	defer func() {
		// A key left loaded takes one of the TPM's few object slots until the next reboot: say
		// so, though the check's own result stands.
		if err := closeAK(); err != nil {
			log.Warn().Err(err).Msg("the AK could not be unloaded from the TPM: it holds one of the TPM's object slots until the machine reboots")
		}
	}()
	pub, err := tpm2.DecodePublic(ak.AttestationParameters().Public) // a loaded AK's Public() is nil
	if err != nil {
		return nil, fmt.Errorf("decode the AK public area of %s: %w", FileLAKBlob, err)
	}
	key, err := pub.Key()
	if err != nil {
		return nil, fmt.Errorf("decode the AK public key of %s: %w", FileLAKBlob, err)
	}
	if _, err := chainPEM(chain, key); err != nil {
		return nil, fmt.Errorf("check %s against %s: %w", FileLAKCert, FileLAKBlob, err)
	}
	// Step 2: a nonce.
	var n api.BootCheckNonce
	if err := c.post(ctx, api.PathBootCheckNonce, struct{}{}, &n); err != nil {
		return nil, err
	}
	// Step 3: the quotes over it, with the event log.
	pp, err := tpm.AttestPlatform(ak, n.Nonce, nil)
	if err != nil {
		return nil, &TPMError{Op: "quote PCRs", Err: err}
	}
	req := api.BootCheckRequest{Token: n.Token, LAKChain: chain, Platform: api.NewPlatform(pp), Claimed: claimed}
	// Step 4: the LDevID key, certified by the same AK over the same nonce. A key that cannot be
	// certified fails only its renewal (fleetd answers ldevid_unproven), never the check.
	if ld != nil {
		req.LDevID = &api.BootCheckLDevID{Chain: ld.chain}
		if ld.pub != nil {
			_ = closeAK() // the TPM has room for few objects: the certification loads its own (a failure is logged by the deferred call)
			cert, err := tpm.CertifyLDevID(blob, ld.pub, ld.priv, n.Nonce)
			if err != nil {
				log.Warn().Err(err).Msg("the LDevID key could not be certified: fleetd cannot renew the LDevID")
			} else {
				req.LDevID.Certification = api.NewCertification(*cert)
			}
		}
	}
	// Step 5: the check.
	var res api.BootCheckResponse
	if err := c.post(ctx, api.PathBootCheck, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// report logs fleetd's answer and turns drift into a *DriftError, a due certificate fleetd did
// not renew into a *NotRenewedError (drift, the worse news, wins).
func report(log zerolog.Logger, res *api.BootCheckResponse) error {
	notRenewed := reportRenewal(log, res)
	switch res.Outcome {
	case api.BootCheckOK:
		log.Info().Str("device", res.Device).Str("outcome", "ok").Bool("baseline_taken", res.BaselineTaken).
			Str("secure_boot", res.SecureBoot).Time("checked_at", res.CheckedAt).Msg("boot check accepted")
		return notRenewed
	case api.BootCheckDrift:
		log.Warn().Str("device", res.Device).Str("outcome", "drift").Strs("changes", res.Changes).
			Time("checked_at", res.CheckedAt).Msg("boot check accepted: the boot differs from the baseline")
		return &DriftError{Device: res.Device, Changes: res.Changes}
	}
	return &FleetdError{Op: "POST " + api.PathBootCheck, Err: fmt.Errorf("fleetd answered outcome %q, want ok or drift", res.Outcome)}
}

// readLAK reads lak.pem (as DER, leaf first) and lak.blob from the node directory.
func readLAK(dir string) ([][]byte, []byte, error) {
	pemBytes, err := os.ReadFile(filepath.Join(dir, FileLAKCert))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, &UsageError{Msg: fmt.Sprintf("%s has no %s: the node is not enrolled, or --dir (FLEETD_NODE_DIR) is wrong", dir, FileLAKCert)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the LAK certificate: %w", err)
	}
	certs, err := pki.ParseCertificatesPEM(pemBytes)
	if err != nil || len(certs) == 0 {
		return nil, nil, fmt.Errorf("read %s: no certificate (%v)", filepath.Join(dir, FileLAKCert), err)
	}
	chain := make([][]byte, len(certs))
	for i, c := range certs {
		chain[i] = c.Raw
	}
	blob, err := os.ReadFile(filepath.Join(dir, FileLAKBlob))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, &UsageError{Msg: fmt.Sprintf("%s has %s but no %s: copy both from the enrollment", dir, FileLAKCert, FileLAKBlob)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the LAK key blob: %w", err)
	}
	return chain, blob, nil
}

// DriftError is an accepted boot check whose boot differs from the device's baseline: fleetd
// recorded it as drift (docs/design.md §5). It is not a failure of the check; ExitCode gives it its own
// code so that a timer's status shows it.
type DriftError struct {
	Device  string
	Changes []string
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("fleetd recorded drift for %s: the boot differs from its baseline: %s", e.Device, strings.Join(e.Changes, "; "))
}

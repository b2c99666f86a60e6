package fleet

import (
	"context"
	"errors"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/pki"
)

// EnrollEvidence answers the second round trip. In order: the token (sealed by fleetd and
// unexpired, before the device's lock and its NetBox read; then for this device, EK and AK, and
// for the request still pending); the activated secret; the
// quotes, PCRs and event log under the nonce; Secure Boot as the class requires; the boot policy
// (the verified boot's components are those of a HookOS boot the class allows); the LDevID key's
// certification; the declared disk found exactly once. Then, for a provision only, the LDevID and
// LAK certificates are issued in memory and the node's configuration is rendered with the LAK
// files and validated (a configuration the OS would reject fails the request here: the
// certificates are dropped, never recorded or handed out, and nothing is wiped). NetBox records
// the attestation with the identity material the configuration is rendered from again when the
// node fetches it (docs/design.md §9), and the answer authorizes the disk. An attest issues nothing: the node keeps the LDevID and LAK its configuration delivered,
// and the attest clears the boot baseline. A wipe or a retirement ends the device's identity.
func (s *Enrollment) EnrollEvidence(ctx context.Context, in EvidenceInput) (Enrolled, Outcome, error) {
	// 0. The token, before anything that costs: the device's lock and NetBox read are taken only
	// for a token fleetd sealed, unexpired, for the device named (evidenceToken).
	sealed, out, err := s.evidenceToken(in.ClaimedDevice, in.Token)
	if err != nil {
		return Enrolled{}, out, err
	}
	unlock := s.core.locks.lock(sealed.Claims().DeviceID)
	defer unlock()
	e, out, err := s.enrollingDevice(ctx, in.ClaimedDevice, "evidence")
	if err != nil {
		return Enrolled{}, out, err
	}
	d, class, action := e.device, e.class, e.action
	// 1. The evidence.
	v, err := s.verifyEvidence(d, class, sealed, in)
	if err != nil {
		return Enrolled{}, s.enrollRefused(ctx, d, out, err, v.ak != nil), err
	}
	// 2. For a provision: the certificates, and the configuration that carries the LAK files.
	var p provisioned
	if action == ActionProvision {
		if p, err = s.provision(ctx, d, class, v, in, &out); err != nil {
			return Enrolled{}, out, err
		}
	}
	// 2b. For a wipe or a retirement: its receipt's token, sealed from the verified values
	// before the write, handed out only after it.
	receipt, err := s.receiptTicket(d, class, action, v)
	if err != nil {
		out.Result = "error"
		return Enrolled{}, out, fmt.Errorf("enroll %s: %w", d.Name, err)
	}
	// 3. NetBox: the attestation and, for a provision, the identity material its configuration
	// is rendered from at the fetch, in one conditional write. If NetBox cannot be written the
	// agent gets a 5xx, its Workflow fails, and nothing is wiped; the certificates are unused.
	msg, patch := attestedRecord(d, action, v, p)
	if action == ActionProvision {
		m := identityFor(d, p, in, v.token.EKSHA256, s.core.clock.Now(), s.configTTL)
		m.FetchSecretSHA256 = p.fetchSecretHash()
		m.BootstrapTokenKey = p.tokenKey
		patch.Identity = &m
	}
	proved, claimed := enrollmentFacts(v, v.claimed)
	if f, changed := nextFacts(d.Owned.Facts, &proved, &claimed, s.core.clock.Now().UTC(), layout.FactsFromEnrollment); changed {
		patch.Facts = &f
	}
	out, wrote, err := s.core.applyRecorded(ctx, d, action, EventAttested, msg, patch)
	if err != nil {
		return Enrolled{}, out, err
	}
	if !wrote {
		// The device changed while the evidence was verified and, read again, its request had
		// moved on: another fleetd instance recorded an attestation of it first (the lock above
		// holds in this process only), or the owner ended the request. What was issued here is
		// not in NetBox, so it is dropped, never handed out.
		out.Result, out.Check = "refused", "no_request"
		s.core.metrics.enrollments.WithLabelValues(string(action), "evidence", "no_request").Inc()
		return Enrolled{}, out, Refuse(RefusedConflict, "no_request",
			"%s's %s request %s moved on while its evidence was verified (another fleetd instance recorded its attestation first, or the request ended): nothing issued here is recorded or handed out",
			d.Name, action, d.Owned.Request)
	}
	out.Step, out.Result = "evidence", "attested"
	s.core.metrics.enrollments.WithLabelValues(string(action), "evidence", "ok").Inc()
	res := Enrolled{Disk: v.disk.Path, FetchSecret: p.fetchSecret, Receipt: receipt}
	if p.ldevid != nil {
		res.LDevIDChain, res.LAKChain = p.ldevid.DER(), p.lak.DER()
	}
	return res, out, nil
}

// errReceiptsUnwired is a wiring bug: Deps.Attest has no receipt sealer.
var errReceiptsUnwired = errors.New("wipe receipts are not wired: fleet.Attestation needs Receipts")

// receiptTicket issues the receipt token of a wipe or a retirement (nil for another action): it
// binds the AK the evidence activated, the boot its quote verified and the declared disk, for as
// long as the class's Workflow may run (docs/http.md, "Wipe receipts").
func (s *Enrollment) receiptTicket(d Device, class Class, action Action, v verified) (*attest.ReceiptTicket, error) {
	if action != ActionWipe && action != ActionRetire {
		return nil, nil
	}
	if s.attest.Receipts == nil {
		return nil, errReceiptsUnwired
	}
	lifetime := class.Timeout
	if lifetime <= 0 {
		lifetime = DefaultWorkflowTimeout
	}
	t, err := s.attest.Receipts.Issue(attest.ReceiptGrant{DeviceID: d.ID, Device: d.Name, Request: d.Owned.Request, Action: string(action),
		AK: v.ak, Boot: v.boot, Disk: v.disk, Lifetime: lifetime})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// provisioned is what a provision makes after the evidence is verified: the certificates, not yet
// recorded or handed out, and the node's configuration that delivers the LAK files.
type provisioned struct {
	ldevid, lak *pki.Certificate
	cfg         NodeConfig
	fetchSecret string // "" when the class kind's install cannot carry one
	tokenKey    string // the seal key its bootstrap token is derived under; "" when not a Talos class
}

func (p provisioned) fetchSecretHash() string {
	if p.fetchSecret == "" {
		return ""
	}
	return FetchSecretHash(p.fetchSecret)
}

// provision issues a provision's LDevID and LAK in memory, then checks the node's configuration
// with the node files (lak.pem: the new LAK and its chain; lak.blob: the AK blob the agent sent;
// ldevid.pem, ldevid.pub, ldevid.priv: the new LDevID and its chain, the key blobs the agent
// sent), so the installed node can run its boot checks (docs/design.md §5) and SPIRE's tpm_devid
// agent (docs/enrollment.md), and draws the fetch secret when the class kind's install carries
// one. A rejected configuration ends the request (renderFailed); the certificates are then
// dropped.
func (s *Enrollment) provision(ctx context.Context, d Device, class Class, v verified, in EvidenceInput, out *Outcome) (provisioned, error) {
	if len(in.LAKBlob) == 0 {
		return provisioned{}, Refuse(RefusedInvalid, "lak_blob_missing",
			"the evidence has no lak_blob, which a provision delivers to the node for its boot checks: run an agent image as new as fleetd")
	}
	if len(in.LDevIDPrivate) == 0 {
		return provisioned{}, Refuse(RefusedInvalid, "ldevid_private_missing",
			"the evidence has no ldevid_private, which a provision delivers to the node for SPIRE's tpm_devid agent: run an agent image as new as fleetd")
	}
	var p provisioned
	var err error
	id := pki.Identity{DeviceName: d.Name, DeviceSerial: d.Serial, HWSerialNum: v.token.HWSerialNum}
	if p.ldevid, err = s.attest.Issuer.IssueLDevID(id, v.ldevid.Public); err != nil {
		return provisioned{}, fmt.Errorf("enroll %s: %w", d.Name, err)
	}
	if p.lak, err = s.attest.Issuer.IssueLAK(id, v.ak.Public); err != nil {
		return provisioned{}, fmt.Errorf("enroll %s: %w", d.Name, err)
	}
	node := NodeIdentity{UUID: in.SMBIOSUUID, Serial: in.SMBIOSSerial, Files: nodeMaterial(p, in).NodeFiles()}
	if class.Kind == KindTalos {
		p.tokenKey = s.core.keys.Signing()
		if node.BootstrapToken, err = s.core.bootstrapToken(d, p.tokenKey); err != nil {
			return provisioned{}, fmt.Errorf("enroll %s: %w", d.Name, err)
		}
	}
	if p.cfg, err = s.renderer.Check(d, class, node); err != nil {
		return provisioned{}, s.renderFailed(ctx, d, ActionProvision, out, err)
	}
	if class.JoinsKubernetes {
		if err := s.createBootstrapToken(ctx, d, node.BootstrapToken); err != nil {
			out.Result = "error"
			return provisioned{}, fmt.Errorf("enroll %s: %w", d.Name, err)
		}
	}
	if class.Kind.CarriesFetchSecret() {
		if p.fetchSecret, err = newFetchSecret(s.rnd); err != nil {
			return provisioned{}, fmt.Errorf("enroll %s: %w", d.Name, err)
		}
	}
	return p, nil
}

// createBootstrapToken creates the Secret of d's bootstrap token in the workload cluster, before
// the attestation is recorded: a cluster that cannot take it fails the enrollment with a 5xx, and
// the agent's Workflow fails before anything is wiped. It expires when the join can no longer
// succeed: the configuration's TTL (its latest fetch) plus the join deadline.
func (s *Enrollment) createBootstrapToken(ctx context.Context, d Device, t BootstrapToken) error {
	if s.cluster == nil {
		return fmt.Errorf("class %s joins Kubernetes but fleetd has no workload cluster (cluster.kubeconfig in fleetd.yaml): configure it, or set joins_kubernetes false on the class", d.Declared.Class)
	}
	sec := BootstrapTokenSecret{Token: t, Group: BootstrapGroup,
		Expires:     s.core.clock.Now().Add(s.configTTL + s.joinDeadline).UTC(),
		Description: fmt.Sprintf("fleetd: kubelet bootstrap token of %s (NetBox device %d) for request %s", d.Name, d.ID, d.Owned.Request)}
	if err := s.cluster.CreateBootstrapToken(ctx, sec); err != nil {
		return fmt.Errorf("create the bootstrap token Secret bootstrap-token-%s of %s in the workload cluster: %w", t.ID, d.Name, err)
	}
	return nil
}

// verified is everything the evidence proved.
type verified struct {
	token  attest.TokenClaims
	ak     *attest.VerifiedAK
	boot   *attest.VerifiedBoot
	ldevid *attest.VerifiedLDevIDKey
	disk   *attest.VerifiedDisk
	// bootPolicy names the boot policy entry the boot matched; claimed is what the agent claimed
	// of the machine, checked and capped (facts.go).
	bootPolicy string
	claimed    layout.ClaimedFacts
}

func (s *Enrollment) verifyEvidence(d Device, class Class, sealed *attest.SealedToken, in EvidenceInput) (verified, error) {
	var v verified
	tok, err := sealed.Bind(attest.Binding{DeviceID: d.ID, Device: d.Name,
		ApprovedEKs: d.Declared.EKHashes, ClaimedAKPublic: in.Platform.Public})
	if err != nil {
		return v, err
	}
	v.token = tok.Claims()
	if v.token.Request != d.Owned.Request {
		return v, &attest.Refusal{Check: attest.CheckTokenBinding,
			Msg: fmt.Sprintf("the token was issued for request %s, and the device's request is now %s", v.token.Request, d.Owned.Request)}
	}
	if v.ak, err = attest.VerifyActivation(tok, in.Secret, in.Platform.Public); err != nil {
		return v, err
	}
	if v.boot, err = attest.VerifyPlatform(v.ak, v.token.Nonce, in.Platform); err != nil {
		return v, err
	}
	if err = attest.RequireSecureBoot(v.boot, class.SecureBoot == SecureBootRequired); err != nil {
		return v, err
	}
	if s.attest.BootPolicy == nil {
		return v, errNoBootPolicy
	}
	if v.bootPolicy, err = s.attest.BootPolicy.Match(v.boot, class.Name); err != nil {
		return v, err
	}
	if v.ldevid, err = attest.VerifyLDevIDKey(v.ak, v.token.Nonce, in.LDevID); err != nil {
		return v, err
	}
	if v.disk, err = attest.MatchDisk(d.Declared.DiskSerial, in.Disks); err != nil {
		return v, err
	}
	v.claimed, err = claimedFacts(ClaimedHardware{SMBIOSUUID: in.SMBIOSUUID, Disks: in.Disks, MAC: in.ClaimedMAC})
	return v, err
}

// errNoBootPolicy is fleetd's own failure: without a boot policy no enrollment is accepted.
var errNoBootPolicy = errors.New("no boot policy is configured (attestation.boot_policy_file), so no boot can be accepted")

// renderFailed ends a provision whose configuration the OS would reject: nothing is recorded,
// served or wiped (the certificates issued for it are dropped unseen), and NetBox says why.
func (s *Enrollment) renderFailed(ctx context.Context, d Device, action Action, out *Outcome, err error) error {
	if !errors.Is(err, ErrConfigRejected) {
		return fmt.Errorf("render the configuration of %s: %w", d.Name, err)
	}
	msg := fmt.Sprintf("%s request %s failed: the configuration of %s would be rejected by its OS, so no certificate was handed out and nothing was wiped: %v.",
		action, d.Owned.Request, d.Name, err)
	if _, aerr := s.core.apply(ctx, d, action, EventRefused, msg); aerr != nil {
		s.core.log.Warn().Err(aerr).Str("device", d.Name).Msg("record the rejected configuration")
	}
	out.Check, out.Result = "config_rejected", "failed"
	return &Refusal{Class: RefusedConflict, Code: "config_rejected", Msg: msg, Err: err}
}

// attestedRecord is the journal entry and the NetBox fields of a successful attestation.
func attestedRecord(d Device, action Action, v verified, prov provisioned) (string, Patch) {
	msg := fmt.Sprintf("Attested %s for %s request %s: EK %.16s… approved, AK activated, quote and event log verified (Secure Boot %s), disk %s found at %s",
		d.Name, action, d.Owned.Request, v.token.EKSHA256, v.boot.SecureBootString(), v.disk.Serial, v.disk.Path)
	var p Patch
	if prov.ldevid != nil {
		ls, ks := prov.ldevid.SerialHex(), prov.lak.SerialHex()
		p.LDevIDSerial, p.LAKSerial = &ls, &ks
		none := "" // a renewal's handover does not outlive a new installation
		p.LDevIDSerialPrevious, p.LAKSerialPrevious = &none, &none
		msg += fmt.Sprintf("; issued LDevID %s and LAK %s", ls, ks)
	}
	if action == ActionProvision || action == ActionAttest {
		// A new installation, or the owner's attest (how an intended boot change is accepted,
		// docs/boot-checks.md), starts a new boot baseline with the next boot check.
		empty, none := "", BootCheckNone
		p.BootBaseline, p.BootCheck = &empty, &none
	}
	if action == ActionProvision {
		msg += "; " + prov.cfg.Summary + " with the LAK files waits for its one fetch"
	}
	if action == ActionAttest {
		msg += "; the node keeps its LDevID and LAK, and its next boot check takes a new boot baseline"
	}
	return msg + ".", p
}

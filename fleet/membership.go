package fleet

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Membership is the kubelet CSR approver (docs/design.md §1, "Joining the cluster"): the workload
// cluster's own auto-approval is off, and fleetd decides every CertificateSigningRequest of the
// kubelet signers on its sealed fields. A kubelet client certificate goes only to a machine that
// attested: the first by the device's own bootstrap token, for the device's own name, once; a
// renewal only by the node itself while its device still passes its checks. Every CSR of those
// signers is approved or denied, the denial's condition saying why: none is left pending for
// another approver to take. The one exception is fleetd failing to read NetBox: no decision is
// made, and the CSR is decided when it is offered again.
type Membership struct {
	core    *core
	cluster Cluster
	// joinDeadline is how long a delivered node has to be Ready (Config.JoinDeadline).
	joinDeadline time.Duration
}

// nodesGroup is the one organization a kubelet certificate may carry.
const nodesGroup = "system:nodes"

// kubeletUsages are the usages the upstream approver accepts for a signer's kubelet certificates
// (k8s.io/kubernetes pkg/apis/certificates, ValidateKubeletClientCSR and
// ValidateKubeletServingCSR), each sorted, compared as sets: with key encipherment or without.
func kubeletUsages(signer string) [][]string {
	if signer == SignerKubeletServing {
		return [][]string{{"digital signature", "key encipherment", "server auth"}, {"digital signature", "server auth"}}
	}
	return [][]string{{"client auth", "digital signature", "key encipherment"}, {"client auth", "digital signature"}}
}

// ReviewCSR decides one CSR of the kubelet signers and writes the decision to the cluster.
// decided is false for a CSR of another signer (not fleetd's to decide) and when an error kept
// fleetd from deciding; err is then fleetd's own failure (NetBox or the cluster unreachable) and
// the CSR is offered again.
func (s *Membership) ReviewCSR(ctx context.Context, csr CSR) (dec CSRDecision, decided bool, err error) {
	if csr.SignerName != SignerKubeletClient && csr.SignerName != SignerKubeletServing {
		return CSRDecision{}, false, nil
	}
	r := &csrReview{s: s, csr: csr, now: s.core.clock.Now()}
	dec, err = r.decide(ctx)
	if err != nil {
		s.core.log.Warn().Err(err).Str("csr", csr.Name).Str("signer", csr.SignerName).Str("username", csr.Username).
			Msg("csr not decided: fleetd could not read what it decides on; it is decided when offered again")
		s.core.metrics.csrDecisions.WithLabelValues(csr.SignerName, "error", "").Inc()
		return CSRDecision{}, false, err
	}
	if err := s.cluster.DecideCSR(ctx, csr, dec); err != nil {
		s.core.metrics.csrDecisions.WithLabelValues(csr.SignerName, "error", "").Inc()
		return dec, false, fmt.Errorf("write the decision on CSR %s: %w", csr.Name, err)
	}
	word := "denied"
	if dec.Approve {
		word = "approved"
		if r.bootstrap {
			r.tokenUsed(ctx)
		}
	}
	s.core.metrics.csrDecisions.WithLabelValues(csr.SignerName, word, dec.Reason).Inc()
	s.core.log.Info().Str("csr", csr.Name).Str("signer", csr.SignerName).Str("username", csr.Username).
		Str("device", r.device.Name).Str("decision", word).Str("reason", dec.Reason).Msg(dec.Message)
	return dec, true, nil
}

// csrReview is one CSR's decision and what it found on the way.
type csrReview struct {
	s   *Membership
	csr CSR
	now time.Time

	req       *x509.CertificateRequest
	device    Device
	bootstrap bool           // approved by the device's bootstrap token: the token is used up
	token     BootstrapToken // the device's token, when the CSR came with it
}

func deny(reason, format string, args ...any) CSRDecision {
	return CSRDecision{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func approve(reason, format string, args ...any) CSRDecision {
	return CSRDecision{Approve: true, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func (r *csrReview) decide(ctx context.Context) (CSRDecision, error) {
	if dec, ok := r.checkRequest(); !ok {
		return dec, nil
	}
	name := strings.TrimPrefix(r.req.Subject.CommonName, nodeUserPrefix)
	d, err := r.s.core.netbox.DeviceByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return deny("UnknownDevice", "no NetBox device is named %s, so fleetd lets no kubelet have its name; a node fleetd does not manage needs its CSR approved by hand", name), nil
	}
	if err != nil {
		return CSRDecision{}, fmt.Errorf("read device %s: %w", name, netboxErr(err))
	}
	if d, err = r.s.core.judgedOnOwnFields(ctx, d); err != nil {
		if ref, ok := AsRefusal(err); ok {
			return deny("DeviceNotTrusted", "%s", ref.Msg), nil
		}
		return CSRDecision{}, err
	}
	r.device = d
	if r.csr.SignerName == SignerKubeletServing {
		return r.serving(), nil
	}
	switch {
	case strings.HasPrefix(r.csr.Username, BootstrapUserPrefix):
		return r.firstClient(ctx)
	case r.csr.Username == r.req.Subject.CommonName:
		return r.renewal(), nil
	}
	return deny("RequesterNotTheNode", "%s asked for a client certificate of %s: only the device's own bootstrap token, or the node itself renewing, may", r.csr.Username, r.req.Subject.CommonName), nil
}

// checkRequest parses the CSR and holds it to what the signer's kubelet certificates are: CN
// system:node:NAME, O exactly [system:nodes], the upstream approver's usages, and no SANs of any
// kind for a client certificate (a serving certificate's are checked against the device).
func (r *csrReview) checkRequest() (CSRDecision, bool) {
	block, _ := pem.Decode(r.csr.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return deny("InvalidRequest", "spec.request is not a PEM CERTIFICATE REQUEST"), false
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err == nil {
		err = req.CheckSignature()
	}
	if err != nil {
		return deny("InvalidRequest", "spec.request is not a certificate request signed by its key: %v", err), false
	}
	r.req = req
	name, ok := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix)
	if !ok || name == "" {
		return deny("SubjectNotANode", "the subject's CN %q is not system:node:<device name>", req.Subject.CommonName), false
	}
	if !slices.Equal(req.Subject.Organization, []string{nodesGroup}) {
		return deny("WrongOrganization", "the subject's O is %q: a kubelet certificate carries exactly [system:nodes], no other group", req.Subject.Organization), false
	}
	usages := slices.Clone(r.csr.Usages)
	slices.Sort(usages)
	usages = slices.Compact(usages)
	want := kubeletUsages(r.csr.SignerName)
	if !slices.ContainsFunc(want, func(w []string) bool { return slices.Equal(w, usages) }) {
		return deny("WrongUsages", "spec.usages %q are not a kubelet's: want %q (key encipherment may be left out)", r.csr.Usages, want[0]), false
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny("SANsNotAllowed", "the request carries email or URI subject alternative names, which no kubelet certificate has"), false
	}
	if r.csr.SignerName == SignerKubeletClient && (len(req.DNSNames) > 0 || len(req.IPAddresses) > 0) {
		return deny("SANsNotAllowed", "a kubelet client certificate carries no subject alternative names; this request has %d DNS and %d IP", len(req.DNSNames), len(req.IPAddresses)), false
	}
	return CSRDecision{}, true
}

// firstClient decides a client CSR made with a bootstrap token: it must be the token of the
// device the CN names, for the device's current request, which is joining; the token serves
// once. The approval is recorded in fleet_identity (sealed) before it is written to the cluster:
// joining ends active only on a Node whose certificate fleetd approved for this request.
func (r *csrReview) firstClient(ctx context.Context) (CSRDecision, error) {
	d := r.device
	tok, ok := r.s.core.requestToken(d)
	if !ok || r.csr.Username != tok.Username() {
		return deny("TokenNotTheDevices", "%s is not the bootstrap token of %s's current request: a token gets a certificate for its own device only", r.csr.Username, d.Name), nil
	}
	if d.Owned.State != StateJoining {
		return deny("DeviceNotJoining", "%s is %s, not joining: its bootstrap token served its purpose or its request ended", d.Name, stateWord(d.Owned.State)), nil
	}
	if why := failsItsChecks(d); why != "" {
		return deny("DeviceFailsItsChecks", "%s %s", d.Name, why), nil
	}
	if prev := d.Owned.Identity.KubeletClient; prev != nil && prev.UID != r.csr.UID {
		return deny("TokenAlreadyUsed", "%s's bootstrap token already got the client certificate of CSR %s at %s: a token serves once; provision the device again for another",
			d.Name, prev.Name, prev.Approved.Format(time.RFC3339)), nil
	}
	r.token = tok
	if d.Owned.Identity.KubeletClient == nil {
		if err := r.recordApproval(ctx); err != nil {
			return CSRDecision{}, err
		}
	}
	r.bootstrap = true
	return approve("AttestedDevice", "%s attested for request %s, and this is its own bootstrap token", d.Name, d.Owned.Request), nil
}

// recordApproval writes the approval into the device's identity, conditionally on the device
// fleetd decided on; a device changed meanwhile is decided on again by the next offer.
func (r *csrReview) recordApproval(ctx context.Context) error {
	id := r.device.Owned.Identity
	id.KubeletClient = &ApprovedCSR{Name: r.csr.Name, UID: r.csr.UID, Approved: r.now.UTC()}
	d, err := r.s.core.update(ctx, r.device, Patch{IfVersion: r.device.Version, Identity: &id})
	if err != nil {
		return fmt.Errorf("record the approval of CSR %s on %s: %w", r.csr.Name, r.device.Name, netboxErr(err))
	}
	r.device = d
	return nil
}

// tokenUsed deletes the used token's Secret: the token's expiry (and the controller manager's
// token cleaner) is the backstop when the cluster refuses now.
func (r *csrReview) tokenUsed(ctx context.Context) {
	if err := r.s.cluster.DeleteBootstrapToken(ctx, r.token.ID); err != nil {
		r.s.core.log.Warn().Err(err).Str("device", r.device.Name).Str("token_id", r.token.ID).
			Msg("deleting the used bootstrap token failed; it expires on its own")
	}
}

// renewal decides a client CSR the node makes with its current certificate: the device must
// still pass its checks, and a joining device's certificate must be the one fleetd approved for
// this request.
func (r *csrReview) renewal() CSRDecision {
	d := r.device
	if why := failsItsChecks(d); why != "" {
		return deny("DeviceFailsItsChecks", "%s %s: its client certificate is not renewed", d.Name, why)
	}
	if d.Owned.State == StateJoining && d.Owned.Identity.KubeletClient == nil {
		return deny("NotBootstrapped", "%s is joining and fleetd approved no client certificate for its request %s: the certificate this renewal is made with is not of this install", d.Name, d.Owned.Request)
	}
	return approve("AttestedDevice", "%s renews its client certificate and still passes its checks", d.Name)
}

// serving decides a kubelet serving CSR: made by the node itself for itself, while its device
// passes its checks, naming only the device's name and its NetBox address.
func (r *csrReview) serving() CSRDecision {
	d := r.device
	if r.csr.Username != r.req.Subject.CommonName {
		return deny("RequesterNotTheNode", "%s asked for the serving certificate of %s: only the node itself may", r.csr.Username, r.req.Subject.CommonName)
	}
	if why := failsItsChecks(d); why != "" {
		return deny("DeviceFailsItsChecks", "%s %s", d.Name, why)
	}
	if len(r.req.DNSNames) == 0 && len(r.req.IPAddresses) == 0 {
		return deny("SANsRequired", "a serving certificate names the node: it needs its DNS name or address as a subject alternative name")
	}
	for _, n := range r.req.DNSNames {
		if !strings.EqualFold(n, d.Name) {
			return deny("SANNotTheDevices", "DNS name %s is not %s's name", n, d.Name)
		}
	}
	for _, ip := range r.req.IPAddresses {
		if !d.Address.IsValid() || !ip.Equal(d.Address.Addr().AsSlice()) {
			return deny("SANNotTheDevices", "address %s is not %s's NetBox address (%s)", ip, d.Name, d.Address.Addr())
		}
	}
	return approve("AttestedDevice", "%s's serving certificate names only the device, which still passes its checks", d.Name)
}

// failsItsChecks says why a device's node may no longer have a certificate, "" when it may: by
// fleetd's sealed fields, a running node (joining or active) whose last boot check did not fail,
// that the owner did not ask to wipe or retire, and that still has the name it was attested
// under (AttestedAs: a CSR's CN names the device, so a device renamed onto another machine's
// name would vouch for that machine).
func failsItsChecks(d Device) string {
	switch {
	case !d.Owned.State.Running():
		return fmt.Sprintf("is %s, not a running node", stateWord(d.Owned.State))
	case d.Owned.BootCheck == BootCheckFailed:
		return "failed its last boot check"
	case d.Status == StatusDecommissioning:
		return "is being retired (status decommissioning)"
	case d.Declared.DesiredAction == ActionWipe || d.Declared.DesiredAction == ActionRetire:
		return fmt.Sprintf("has an open %s request", d.Declared.DesiredAction)
	}
	if attested, renamed := AttestedAs(d); renamed {
		return fmt.Sprintf("was attested as %s and renamed since: a kubelet certificate of either name may belong to another machine; provision the device again under its new name", attested)
	}
	return ""
}

package fleet

import (
	"fmt"
	"strings"
	"time"
)

// What a configuration fetch may be served is decided from NetBox alone (docs/design.md §9): the
// device at the fetch's address, its current request, and the identity material the request's
// attestation recorded. Nothing is held in memory between the attestation and the fetch, so a
// restart of fleetd, or another fleetd instance, serves the same configuration.
//
// Trust: the device and its fields are read from NetBox; the fetch's UUID, fetch secret and source
// address are claims checked against them (ConfigFetch).

// deliveryState is where a device's configuration is, read from its fields.
type deliveryState int

const (
	deliveryNone      deliveryState = iota // no provision request with a configuration to deliver
	deliveryOpen                           // attested, not fetched, in time: one fetch may take it
	deliveryDelivered                      // the current provision's configuration was fetched
	deliveryExpired                        // its time ran out unfetched
	deliveryLost                           // attested by an older fleetd that kept it in memory
)

// delivery reads where the device's configuration is. A configuration belongs to exactly one
// request: fleet_identity names the request it was issued for, and only while that request is the
// device's current one (fleet_request), a provision, and installing (a NoCloud seed is fetched by
// its install Workflow; another node may boot before Tinkerbell reports the Workflow's success)
// or configuring is it open.
// The move to active is the conditional write that exactly one fetch wins (FetchConfig).
//
// That write also moves the device status, a top-level field, to active, which no client writing
// back custom_fields it read sends (pynetbox's save() sends only the top-level fields it changed;
// docs/design.md §9): a provision's claim sets the status staged, so a running provision whose
// status is active was delivered, whatever its fleet_state says (a copy read before the delivery
// writes fleet_state configuring back, and fleet_identity with it).
func delivery(d Device, now time.Time) deliveryState {
	id := d.Owned.Identity
	provision := RequestAction(d.Owned.Request) == ActionProvision
	running := d.Owned.State == StateInstalling || d.Owned.State == StateConfiguring
	switch {
	case !provision:
		return deliveryNone
	case d.Owned.State.Running(), running && d.Status == StatusActive:
		return deliveryDelivered
	case running && id.Empty():
		return deliveryLost
	case !running || id.Request != d.Owned.Request:
		return deliveryNone
	case !now.Before(id.Expires):
		return deliveryExpired
	}
	return deliveryOpen
}

// fetchRefusal is the answer to a fetch the device's fields do not open, or nil when they do.
func fetchRefusal(d Device, class Class, f ConfigFetch, now time.Time) *Refusal {
	switch delivery(d, now) {
	case deliveryDelivered:
		return Refuse(RefusedGone, "config_delivered",
			"the configuration of %s was already delivered and is served only once; provision the device again for a new one", d.Name)
	case deliveryExpired:
		return Refuse(RefusedGone, "config_expired",
			"the configuration of %s expired before it was fetched; provision the device again", d.Name)
	case deliveryLost:
		return Refuse(RefusedGone, "config_lost",
			"the configuration of %s was rendered by an older fleetd that kept it in memory, and is lost; set desired_action=provision in NetBox to provision again", d.Name)
	case deliveryNone:
		return Refuse(RefusedNotFound, "no_pending_config",
			"no configuration is pending for %s (fleet_state %s); it is rendered when a provision request attests", d.Name, stateWord(d.Owned.State))
	}
	if err := d.Owned.Identity.Check(); err != nil {
		return &Refusal{Class: RefusedConflict, Code: "identity_unreadable",
			Msg: fmt.Sprintf("the identity recorded for %s cannot be read by this fleetd: %v; provision the device again", d.Name, err), Err: err}
	}
	switch {
	case !d.Owned.Identity.MatchesUUID(f.ClaimedUUID):
		return Refuse(RefusedForbidden, "wrong_uuid",
			"the uuid in the query is not the SMBIOS UUID the machine at %s attested with", f.RemoteAddr)
	case d.Owned.Identity.FetchSecretSHA256 != "" && strings.TrimSpace(f.ClaimedSecret) == "":
		return Refuse(RefusedForbidden, "fetch_secret_missing",
			"the fetch from %s presents no fetch secret, and the attestation of %s handed one out: %s", f.RemoteAddr, d.Name, f.Kind.carrySecret())
	case d.Owned.Identity.FetchSecretSHA256 != "" && !d.Owned.Identity.MatchesFetchSecret(f.ClaimedSecret):
		return Refuse(RefusedForbidden, "wrong_fetch_secret",
			"the fetch secret presented from %s is not the one the attestation of %s handed out", f.RemoteAddr, d.Name)
	case class.Kind.Route() != f.Kind.Route():
		return Refuse(RefusedNotFound, "wrong_kind",
			"the configuration pending for %s is a %s configuration: fetch it from /v1/config/%s", d.Name, class.Kind, class.Kind.Route())
	}
	if attested, renamed := AttestedAs(d); renamed {
		// Rendered now, the configuration would name the node d.Name while its certificates
		// name it attested: no node of either name (AttestedAs).
		return Refuse(RefusedConflict, "device_renamed",
			"%s was attested as %s and renamed since: its certificates carry the name %s; rename it back, or provision it again under its new name", d.Name, attested, attested)
	}
	return nil
}

// endsRequest is the event and message a fetch or the reconcile records when the device's
// configuration can no longer be delivered, or ok false when the request goes on.
func endsRequest(d Device, now time.Time) (Event, string, bool) {
	switch delivery(d, now) {
	case deliveryExpired:
		return EventConfigLost, fmt.Sprintf("provision request %s failed: the node did not fetch its configuration before it expired at %s; set desired_action=provision to provision again.",
			d.Owned.Request, d.Owned.Identity.Expires.UTC().Format(time.RFC3339)), true
	case deliveryLost:
		return EventConfigLost, fmt.Sprintf("provision request %s failed: its configuration was rendered by an older fleetd that kept configurations in memory, and is lost; set desired_action=provision to provision again.",
			d.Owned.Request), true
	}
	return "", "", false
}

// identityFor is the identity material a provision's attestation records: the name of the device
// the certificates were issued for and the configuration rendered for (a rename before the write
// lands leaves the device renamed since its attestation, AttestedAs), the certificates just
// issued, the blobs the attested agent sent (the LDevID public area is the one its certification
// verified), the UUID's hash and the approved EK's.
func identityFor(d Device, p provisioned, in EvidenceInput, ekSHA256 string, now time.Time, ttl time.Duration) IdentityMaterial {
	m := nodeMaterial(p, in)
	m.Version, m.Request, m.Name, m.Issued, m.Expires = IdentityVersion, d.Owned.Request, d.Name, now.UTC(), now.Add(ttl).UTC()
	m.UUIDSHA256, m.SMBIOSSerial, m.EKSHA256 = UUIDHash(in.SMBIOSUUID), in.SMBIOSSerial, ekSHA256
	return m
}

// nodeMaterial is the part of the identity material the node files are made of (NodeFiles), the
// same at the enrollment's render and at the fetch's.
func nodeMaterial(p provisioned, in EvidenceInput) IdentityMaterial {
	return IdentityMaterial{
		LAK:    LAKMaterial{Chain: p.lak.DER(), Blob: in.LAKBlob},
		LDevID: LDevIDMaterial{Chain: p.ldevid.DER(), Public: in.LDevID.Public, Private: in.LDevIDPrivate}}
}

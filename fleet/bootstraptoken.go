package fleet

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"
)

// A device's kubelet bootstrap token (docs/design.md §1, "Joining the cluster"). Every Talos
// configuration fleetd renders carries a token of its own device and request in cluster.token,
// never the secrets bundle's shared one: whoever reads one configuration can ask the cluster for
// a client certificate in that node's name only, and fleetd's approver (membership.go) approves it
// only for that name. The token is derived, not stored: HMAC-SHA256 under one of the seal keys
// (the one fleet_identity names, so a rotation between the attestation and the fetch changes
// nothing) over the device id and the request id, so the attestation that creates its Secret in
// the workload cluster and the fetch that renders it agree without keeping the secret anywhere
// but the cluster.

// BootstrapToken is a Kubernetes bootstrap token: [a-z0-9]{6}.[a-z0-9]{16}
// (k8s.io/cluster-bootstrap/token/api BootstrapTokenPattern).
type BootstrapToken struct {
	ID     string // the public part: the Secret's name is bootstrap-token-<ID>
	Secret string
}

// String is the token as a kubelet presents it, id.secret.
func (t BootstrapToken) String() string { return t.ID + "." + t.Secret }

// Username is who the API server authenticates the token as (system:bootstrap:<id>).
func (t BootstrapToken) Username() string { return BootstrapUserPrefix + t.ID }

// BootstrapUserPrefix is the username prefix of a bootstrap token's user
// (k8s.io/cluster-bootstrap/token/api BootstrapUserPrefix).
const BootstrapUserPrefix = "system:bootstrap:"

// BootstrapGroup is the extra group fleetd's tokens authenticate as: the group Talos's own
// bootstrap token carries and its RBAC binds to system:node-bootstrapper (Talos v1.11,
// k8stemplates.KubeletBootstrapTokenSecret), so a fleetd token may create a CSR wherever Talos's
// may.
const BootstrapGroup = "system:bootstrappers:nodes"

// BootstrapTokenSecret is what fleetd creates in the workload cluster's kube-system for a
// device's token: a Secret of type bootstrap.kubernetes.io/token named bootstrap-token-<id>,
// usable for authentication only, expiring when the device's join can no longer succeed.
type BootstrapTokenSecret struct {
	Token       BootstrapToken
	Group       string // auth-extra-groups: BootstrapGroup
	Expires     time.Time
	Description string // names the device and the request
}

// bootstrapTokenLabel separates the token's MAC from every other use of a seal key.
const bootstrapTokenLabel = "fleetd kubelet-bootstrap-token v1"

// tokenAlphabet is a bootstrap token's alphabet.
const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// deriveBootstrapToken is the token of device id's request under secret: the MAC's bytes below
// 252 (7 × 36) taken mod 36, so every character is uniform; a further block, the MAC of the
// previous one, when 32 bytes give fewer than 22 such characters.
func deriveBootstrapToken(secret []byte, deviceID int64, request string) BootstrapToken {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(bootstrapTokenLabel))
	mac.Write([]byte{0})
	mac.Write(strconv.AppendInt(nil, deviceID, 10))
	mac.Write([]byte{0})
	mac.Write([]byte(request))
	block := mac.Sum(nil)
	out := make([]byte, 0, 22)
	for len(out) < 22 {
		for _, b := range block {
			if b < 252 && len(out) < 22 {
				out = append(out, tokenAlphabet[b%36])
			}
		}
		next := hmac.New(sha256.New, secret)
		next.Write(block)
		block = next.Sum(nil)
	}
	return BootstrapToken{ID: string(out[:6]), Secret: string(out[6:])}
}

// BootstrapToken is the bootstrap token of NetBox device deviceID's request under the seal key
// keyID: what fleetd renders into the device's Talos configuration and creates in the cluster.
func (k *SealKeys) BootstrapToken(keyID string, deviceID int64, request string) (BootstrapToken, error) {
	secret, ok := k.byID[keyID]
	if !ok {
		return BootstrapToken{}, fmt.Errorf("the bootstrap token was derived under seal key %q, which netbox.seal_keys no longer lists: put the key back, or provision the device again", keyID)
	}
	return deriveBootstrapToken(secret, deviceID, request), nil
}

// bootstrapToken is the token of d's request d.Owned.Request under the seal key keyID.
func (s *core) bootstrapToken(d Device, keyID string) (BootstrapToken, error) {
	t, err := s.keys.BootstrapToken(keyID, d.ID, d.Owned.Request)
	if err != nil {
		return BootstrapToken{}, fmt.Errorf("%s's request %s: %w", d.Name, d.Owned.Request, err)
	}
	return t, nil
}

// requestToken is the bootstrap token of d's current request as its attestation recorded it
// (fleet_identity's bootstrap_token_key), ok false when the request has none: not a provision of
// a Talos class, or attested by a fleetd that made none.
func (s *core) requestToken(d Device) (BootstrapToken, bool) {
	id := d.Owned.Identity
	if id.BootstrapTokenKey == "" || id.Request != d.Owned.Request {
		return BootstrapToken{}, false
	}
	t, err := s.bootstrapToken(d, id.BootstrapTokenKey)
	return t, err == nil
}

package stack

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/render"
)

// NetBox users of the stack: the owner acts with the admin token, fleetd with its own (its
// updates are recognised as echoes by this user name, config netbox.service_user).
const (
	OwnerUser   = "admin"
	ServiceUser = "fleetd"
)

// SealKeyID is the id of the stack's one seal key (netbox.seal_keys).
const SealKeyID = "stack"

// generated are the secrets a test or a person needs as values; every one is also in a file.
type generated struct {
	webhookSecret, operatorToken, metricsToken, adminToken, fleetdToken string
}

// generateSecrets writes every secret fleetd reads into the state directory, mode 0600: the
// webhook secret, the operator token, the metrics token, the attestation token key (32 random bytes, hex), the seal
// key of the fields fleetd owns (SealKeyID; 32 random bytes, hex), a Talos
// secrets bundle, fleetd's TLS CA and server certificate (tls.go), and the LDevID and LAK CAs
// (pki.NewCA: an ECDSA P-256 root and issuing CA; ca/<name>.pem holds the issuing CA then the
// root, ca/<name>.key its key). The NetBox tokens
// follow in addTokens, once the emulator runs.
func generateSecrets(p paths, rnd io.Reader, clock fleet.Clock) (*generated, error) {
	g := &generated{}
	var err error
	if g.webhookSecret, err = randomHex(rnd, 32); err != nil {
		return nil, err
	}
	if g.operatorToken, err = randomHex(rnd, 32); err != nil {
		return nil, err
	}
	if g.metricsToken, err = randomHex(rnd, 32); err != nil {
		return nil, err
	}
	tokenKey, err := randomHex(rnd, 32)
	if err != nil {
		return nil, err
	}
	sealKey, err := randomHex(rnd, 32)
	if err != nil {
		return nil, err
	}
	talos, err := render.GenerateTalosSecrets(clock)
	if err != nil {
		return nil, err
	}
	for path, v := range map[string][]byte{p.webhookSecret: []byte(g.webhookSecret), p.operatorToken: []byte(g.operatorToken),
		p.metricsToken: []byte(g.metricsToken), p.tokenKey: []byte(tokenKey), p.sealKey: []byte(sealKey), p.talosSecrets: talos} {
		if err := writeSecret(path, v); err != nil {
			return nil, err
		}
	}
	if err := writeFleetdTLS(rnd, clock, p.fleetdCA, p.fleetdTLSCert, p.fleetdTLSKey); err != nil {
		return nil, err
	}
	for _, ca := range []struct{ name, base string }{{"fleetsim LDevID", "ldevid"}, {"fleetsim LAK", "lak"}} {
		c, _, err := pki.NewCA(pki.NewCAConfig{Name: ca.name, Rand: rnd, Now: clock.Now})
		if err != nil {
			return nil, err
		}
		if _, err := c.WriteFiles(p.ca, ca.base); err != nil {
			return nil, fmt.Errorf("write the %s CA: %w", ca.name, err)
		}
	}
	return g, nil
}

// addTokens creates fleetd's service token and the owner's token in the emulator (v2 tokens,
// "nbt_<key>.<secret>", as NetBox 4.6 issues) and writes them to their files.
func (g *generated) addTokens(emu *netboxemu.Emulator, p paths) error {
	var err error
	if g.fleetdToken, err = emu.AddToken(netboxemu.TokenSpec{User: ServiceUser}); err != nil {
		return fmt.Errorf("create fleetd's NetBox token: %w", err)
	}
	if g.adminToken, err = emu.AddToken(netboxemu.TokenSpec{User: OwnerUser}); err != nil {
		return fmt.Errorf("create the owner's NetBox token: %w", err)
	}
	if err := writeSecret(p.netboxToken, []byte(g.fleetdToken)); err != nil {
		return err
	}
	return writeSecret(p.adminToken, []byte(g.adminToken))
}

// writeSecret writes a secret file readable by its owner only.
func writeSecret(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write secret: %w", err)
	}
	return nil
}

func randomHex(rnd io.Reader, n int) (string, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return "", fmt.Errorf("draw a secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

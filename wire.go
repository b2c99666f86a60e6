package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/kea"
	"github.com/folly-infra/fleetd/pki"
)

// secrets are the contents of the secret files the config names.
type secrets struct {
	netboxToken, webhook, operator, talos, tokenKey []byte
}

// readSecrets reads every secret file and reports every one that is missing or empty.
func readSecrets(cfg *config.Config) (secrets, error) {
	var s secrets
	var errs []error
	read := func(dst *[]byte, key, path string) {
		b, err := cfg.ReadSecret(key, path)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = b
	}
	read(&s.netboxToken, "netbox.token_file", cfg.NetBox.TokenFile)
	read(&s.webhook, "netbox.webhook_secret_file", cfg.NetBox.WebhookSecretFile)
	read(&s.operator, "operator.token_file", cfg.Operator.TokenFile)
	read(&s.talos, "talos.secrets_file", cfg.Talos.SecretsFile)
	read(&s.tokenKey, "attestation.token_key_file", cfg.Attestation.TokenKeyFile)
	return s, errors.Join(errs...)
}

// newAttestation builds the EK policy, the token sealer, the certificate issuer, and the boot
// check's LAK verifier and nonce sealer.
func newAttestation(cfg *config.Config, tokenKey []byte, clock fleet.Clock) (fleet.Attestation, error) {
	var bundle []byte
	if cfg.Attestation.EKPolicy == string(attest.EKPolicyHashCert) {
		b, err := os.ReadFile(cfg.Path(cfg.Attestation.EKCABundle))
		if err != nil {
			return fleet.Attestation{}, fmt.Errorf("attestation.ek_ca_bundle: %w", err)
		}
		bundle = b
	}
	ek, err := attest.NewEKVerifier(attest.EKVerifierConfig{Policy: attest.EKPolicy(cfg.Attestation.EKPolicy), BundlePEM: bundle, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation: %w", err)
	}
	key, err := attest.ParseTokenKey(tokenKey)
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation.token_key_file: %w", err)
	}
	tokens, err := attest.NewTokenSealer(attest.TokenConfig{Key: key, Lifetime: cfg.Attestation.TokenLifetime.D(), Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("attestation: %w", err)
	}
	ldevid, err := pki.LoadCA(cfg.Path(cfg.PKI.LDevID.Cert), cfg.Path(cfg.PKI.LDevID.Key))
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.ldevid: %w", err)
	}
	lak, err := pki.LoadCA(cfg.Path(cfg.PKI.LAK.Cert), cfg.Path(cfg.PKI.LAK.Key))
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.lak: %w", err)
	}
	issuer, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ldevid, LAK: lak, LDevIDLifetime: cfg.PKI.LDevID.Lifetime.D(),
		LAKLifetime: cfg.PKI.LAK.Lifetime.D(), LDevIDRenewAfter: cfg.PKI.LDevID.RenewAfter.D(), LAKRenewAfter: cfg.PKI.LAK.RenewAfter.D(),
		Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki: %w", err)
	}
	// The boot check trusts LAK certificates of the LAK CA (pki.lak.cert) and seals its nonces
	// under a key derived from the attestation token key (docs/boot-checks.md).
	lakVerifier, err := attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: lak.Cert, Above: lak.Above, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("pki.lak: %w", err)
	}
	nonces, err := attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: key, Lifetime: cfg.BootCheck.NonceLifetime.D(),
		Rand: rand.Reader, Now: clock.Now})
	if err != nil {
		return fleet.Attestation{}, fmt.Errorf("boot_check: %w", err)
	}
	return fleet.Attestation{EK: ek, Tokens: tokens, Issuer: issuer, LAK: lakVerifier, BootNonces: nonces}, nil
}

func newRenderer(cfg *config.Config, talosSecrets []byte, clock fleet.Clock) (*fleet.Renderer, error) {
	rc := fleet.RenderConfig{TalosSecrets: talosSecrets, TalosVersion: cfg.Talos.TalosVersion,
		ClusterName: cfg.Talos.ClusterName, ClusterEndpoint: cfg.Talos.Endpoint,
		KubernetesVersion: cfg.Talos.KubernetesVersion, Endpoints: cfg.Seed.Endpoints, NTP: cfg.Seed.NTP,
		Clock: clock, Random: rand.Reader}
	for _, s := range cfg.Seed.DNS {
		rc.DNS = append(rc.DNS, netip.MustParseAddr(s)) // validated by config
	}
	if cfg.Seed.Gateway != "" {
		rc.Gateway = netip.MustParseAddr(cfg.Seed.Gateway)
	}
	r, err := fleet.NewRenderer(rc)
	if err != nil {
		return nil, fmt.Errorf("talos/seed: %w", err)
	}
	return r, nil
}

func newKeaWriter(cfg *config.Config, log zerolog.Logger, reg prometheus.Registerer) (*kea.Writer, error) {
	kc := kea.Config{Path: cfg.Kea.ReservationsFile, ControlSocket: cfg.Kea.ControlSocket, Logger: log, Registry: reg}
	if cfg.Kea.Subnet != "" {
		kc.Subnet = netip.MustParsePrefix(cfg.Kea.Subnet).Masked()
	}
	w, err := kea.NewWriter(kc)
	if err != nil {
		return nil, fmt.Errorf("kea: %w", err)
	}
	return w, nil
}

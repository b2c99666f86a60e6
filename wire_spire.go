package main

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/spire"
)

// newSPIRE is the SPIRE server whose agents a wipe or a retirement bans (docs/operate.md,
// "SPIRE"), or nil when spire.server_socket is not set: then no agent is banned, and a retired
// machine's SPIRE identity lasts until its LDevID lapses (docs/security.md, "SPIRE identity").
// The agents are named by the subject CN of fleetd's LDevID CA (pki.ldevid.cert).
func newSPIRE(cfg *config.Config, log zerolog.Logger) (fleet.SPIRE, error) {
	if cfg.SPIRE.ServerSocket == "" {
		log.Info().Msg("spire.server_socket is not set: a wipe or a retirement bans no SPIRE agent (docs/operate.md, \"SPIRE\")")
		return nil, nil
	}
	raw, err := os.ReadFile(cfg.Path(cfg.PKI.LDevID.Cert))
	if err != nil {
		return nil, fmt.Errorf("pki.ldevid.cert: %w", err)
	}
	certs, err := pki.ParseCertificatesPEM(raw)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("pki.ldevid.cert: no certificate: %v", err)
	}
	s, err := spire.New(spire.Config{ServerSocket: cfg.SPIRE.ServerSocket, IssuerCN: certs[0].Subject.CommonName})
	if err != nil {
		return nil, fmt.Errorf("spire.server_socket: %w", err)
	}
	return s, nil
}

// Package spire is fleetd's adapter to a SPIRE server's agent API (fleet.SPIRE): it bans the
// tpm_devid agents of a device whose wipe or retirement starts (docs/operate.md, "SPIRE";
// docs/security.md, "SPIRE identity").
//
// It talks to the server's admin socket (spire-server's socket_path, the one its own CLI uses):
// SPIRE treats a caller on that unix socket as an admin, so reaching the socket is the whole
// authorization and the socket's file permissions are the control (docs/operate.md).
//
// Which agents: SPIRE's tpm_devid attestor names an agent by the SHA-1 of its LDevID
// certificate, so every renewal makes a new agent ID, and a renewed node has attested under each
// LDevID it presented. What stays across renewals is the certificate's subject: fleetd issues
// every LDevID of a device with the device's name as its CN (and renews with the CN of the
// certificate it replaces), and SPIRE records it as the selector tpm_devid:subject:cn:NAME beside
// tpm_devid:issuer:cn:CA. BanDevice lists the agents carrying both selectors (SPIRE's
// MATCH_SUPERSET) and bans each one not yet banned. A banned agent ID is refused at its next
// attestation ("agent is banned"), so a node holding its previous and its current LDevID can
// attest with neither once both were seen; an LDevID the node never presented has no agent to
// ban yet, which is why fleet bans again at each reconcile pass while the request runs.
package spire

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	agentv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/agent/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// attestationType is the node attestor whose agents fleetd bans: the one of its LDevIDs.
const attestationType = "tpm_devid"

// pageSize bounds one ListAgents answer; a device has one agent per LDevID it presented.
const pageSize = 100

// Config is the adapter's configuration (fleetd.yaml's spire section).
type Config struct {
	// ServerSocket is the absolute path of the SPIRE server's admin API socket (its socket_path).
	ServerSocket string
	// IssuerCN is the subject CN of the CA that issues fleetd's LDevIDs (pki.ldevid.cert): SPIRE's
	// tpm_devid:issuer:cn selector, so that a device of the same name under another DevID CA the
	// server trusts is not banned.
	IssuerCN string
}

// Server is a SPIRE server's agent API. It is safe for concurrent use.
type Server struct {
	conn   *grpc.ClientConn
	agents agentv1.AgentClient
	issuer string
}

// New connects to the server's admin socket lazily: a server down at fleetd's start is an error
// of the first ban, which fleet retries, not of fleetd's start.
func New(cfg Config) (*Server, error) {
	switch {
	case !filepath.IsAbs(cfg.ServerSocket):
		return nil, fmt.Errorf("spire: server socket %q is not an absolute path; set spire.server_socket to the SPIRE server's socket_path", cfg.ServerSocket)
	case cfg.IssuerCN == "":
		return nil, errors.New("spire: fleetd's LDevID CA has no subject CN, which SPIRE's tpm_devid:issuer:cn selector needs; issue the CA with a CN")
	}
	conn, err := grpc.NewClient("unix://"+cfg.ServerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("spire: server socket %s: %w", cfg.ServerSocket, err)
	}
	return &Server{conn: conn, agents: agentv1.NewAgentClient(conn), issuer: cfg.IssuerCN}, nil
}

// Close closes the connection.
func (s *Server) Close() error { return s.conn.Close() }

// BanDevice implements fleet.SPIRE: it bans every unbanned tpm_devid agent whose selectors carry
// the device's name as the LDevID's subject CN and fleetd's LDevID CA as its issuer.
func (s *Server) BanDevice(ctx context.Context, device string) (int, error) {
	ids, err := s.unbanned(ctx, device)
	if err != nil {
		return 0, err
	}
	banned := 0
	for _, id := range ids {
		_, err := s.agents.BanAgent(ctx, &agentv1.BanAgentRequest{Id: id})
		switch {
		case status.Code(err) == codes.NotFound: // evicted or pruned since the listing: nothing to ban
		case err != nil:
			return banned, fmt.Errorf("ban SPIRE agent spiffe://%s%s of %s: %w", id.TrustDomain, id.Path, device, err)
		default:
			banned++
		}
	}
	return banned, nil
}

// Selectors are the tpm_devid selectors that name the device's agents.
func (s *Server) Selectors(device string) []*types.Selector {
	return []*types.Selector{
		{Type: attestationType, Value: "subject:cn:" + device},
		{Type: attestationType, Value: "issuer:cn:" + s.issuer},
	}
}

// unbanned lists the IDs of the device's agents not yet banned.
func (s *Server) unbanned(ctx context.Context, device string) ([]*types.SPIFFEID, error) {
	filter := &agentv1.ListAgentsRequest_Filter{
		ByAttestationType: attestationType,
		BySelectorMatch:   &types.SelectorMatch{Selectors: s.Selectors(device), Match: types.SelectorMatch_MATCH_SUPERSET},
		ByBanned:          wrapperspb.Bool(false),
	}
	var ids []*types.SPIFFEID
	for token := ""; ; {
		resp, err := s.agents.ListAgents(ctx, &agentv1.ListAgentsRequest{Filter: filter, OutputMask: &types.AgentMask{},
			PageSize: pageSize, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list SPIRE agents of %s: %w", device, err)
		}
		for _, a := range resp.GetAgents() {
			ids = append(ids, a.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" || len(resp.GetAgents()) == 0 {
			return ids, nil
		}
	}
}

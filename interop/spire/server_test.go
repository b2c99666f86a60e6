package spire_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	agentv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/agent/v1"
	serverrun "github.com/spiffe/spire/cmd/spire-server/cli/run"
	agentattestor "github.com/spiffe/spire/pkg/agent/attestor/node"
	agentna "github.com/spiffe/spire/pkg/agent/plugin/nodeattestor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// spireServerRun is SPIRE's server, run in this process as `spire-server run -config` runs it
// (its own run command: the sqlite datastore, the agent API on a TCP port, the admin API on a
// unix socket), with the tpm_devid node attestor trusting LDevIDs under devIDCA and EK
// certificates issued by a CA in ekCA. It is stopped when the test ends.
type spireServerRun struct {
	addr   string // the agent API, where agents attest
	socket string // the admin API: fleetd's spire.server_socket
}

// runSPIREServer starts the server with its admin socket at socket (a path short enough for a
// unix socket) and waits until both APIs answer.
func runSPIREServer(t *testing.T, socket, devIDCA, ekCA string) spireServerRun {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	conf := fmt.Sprintf(`server {
	bind_address = "127.0.0.1"
	bind_port = "%d"
	socket_path = %q
	trust_domain = %q
	data_dir = %q
	log_level = "WARN"
	ratelimit { attestation = false }
}
plugins {
	DataStore "sql" { plugin_data { database_type = "sqlite3" connection_string = %q } }
	KeyManager "memory" { plugin_data {} }
	NodeAttestor "tpm_devid" { plugin_data { devid_ca_path = %q endorsement_ca_path = %q } }
}
`, port, socket, trustDomain, dir, filepath.Join(dir, "datastore.sqlite3"), devIDCA, ekCA)
	path := filepath.Join(dir, "server.conf")
	must(t, os.WriteFile(path, []byte(conf), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- serverrun.NewRunCommand(ctx, nil, false).Run([]string{"-config", path}) }()
	t.Cleanup(func() { cancel(); <-done })
	s := spireServerRun{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), socket: socket}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("spire-server run exited %d before it served (its log is above)", code)
		default:
		}
		if up(s.addr, "tcp") && up(s.socket, "unix") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("spire-server did not serve its APIs within 2 minutes")
		}
	}
}

func up(addr, network string) bool {
	c, err := net.Dial(network, addr)
	if err == nil {
		_ = c.Close()
	}
	return err == nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// attest runs one node attestation of the agent plugin a against the server's agent API the way
// spire-agent does (its attestor.ServerStream: AttestAgent with the plugin's payload and a CSR for
// the agent's SVID, then the challenges), bootstrapping TLS without checking the server, as
// spire-agent's insecure_bootstrap. It returns the agent's SVID.
func (s spireServerRun) attest(ctx context.Context, a *agentna.V1) (*x509.Certificate, error) {
	//nolint:gosec // insecure_bootstrap: the test trusts its own server
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	st := &agentattestor.ServerStream{Client: agentv1.NewAgentClient(conn), Csr: csr, Log: log}
	if err := a.Attest(ctx, st); err != nil {
		return nil, err
	}
	if len(st.SVID) == 0 {
		return nil, fmt.Errorf("the server answered the attestation with no SVID")
	}
	return st.SVID[0], nil
}

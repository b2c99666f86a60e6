package spire_test

import (
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/spire"
)

// TestNew: the adapter refuses a configuration it could not ban with, naming what to set. The
// bans themselves are tested against SPIRE's own server in interop/spire (TestSPIREBan).
func TestNew(t *testing.T) {
	rows := []struct {
		name    string
		cfg     spire.Config
		wantErr string
	}{
		{name: "ok/absolute socket, fleetd's LDevID CA", cfg: spire.Config{ServerSocket: "/run/spire/server/private/api.sock", IssuerCN: "fleetd LDevID CA"}},
		{name: "refuse/relative socket", cfg: spire.Config{ServerSocket: "api.sock", IssuerCN: "fleetd LDevID CA"},
			wantErr: `server socket "api.sock" is not an absolute path; set spire.server_socket`},
		{name: "refuse/no socket", cfg: spire.Config{IssuerCN: "fleetd LDevID CA"}, wantErr: `server socket "" is not an absolute path`},
		{name: "refuse/LDevID CA without a CN", cfg: spire.Config{ServerSocket: "/run/spire/api.sock"},
			wantErr: "fleetd's LDevID CA has no subject CN"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			s, err := spire.New(r.cfg)
			if r.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), r.wantErr) {
					t.Fatalf("New: %v, want an error with %q", err, r.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := []string{"tpm_devid subject:cn:node-a", "tpm_devid issuer:cn:fleetd LDevID CA"}
			for i, sel := range s.Selectors("node-a") {
				if got := sel.GetType() + " " + sel.GetValue(); got != want[i] {
					t.Errorf("selector %d %q, want %q", i, got, want[i])
				}
			}
		})
	}
}

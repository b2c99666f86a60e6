package fleet_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

func TestFetchConfig(t *testing.T) {
	home := netip.MustParseAddr("10.0.0.5")
	type row struct {
		name       string
		state      State
		pending    bool
		expire     bool // the clock passes the pending TTL before the fetch
		fetch      ConfigFetch
		wantCode   string // "" = delivered
		wantState  State
		wantStatus Status
		wantJourn  string
	}
	rows := []row{
		{name: "ok/delivered once: active, journal names what and to whom", state: StateConfiguring, pending: true,
			fetch:     ConfigFetch{Kind: KindTalos, ClaimedUUID: strings.ToUpper(attestedUUID), RemoteAddr: home},
			wantState: StateActive, wantStatus: StatusActive, wantJourn: "success: Delivered Talos worker config to node-a at 10.0.0.5"},
		{name: "ok/NoCloud during the install Workflow: active", state: StateInstalling, pending: true,
			fetch:     ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantState: StateActive, wantStatus: StatusActive, wantJourn: "success: Delivered"},
		{name: "refuse/wrong UUID: not consumed", state: StateConfiguring, pending: true,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: "00000000-0000-0000-0000-000000000000", RemoteAddr: home},
			wantCode: "wrong_uuid", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/right UUID from another address: not consumed", state: StateConfiguring, pending: true,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.99")},
			wantCode: "wrong_address", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/no uuid in the query", state: StateConfiguring, pending: true,
			fetch:    ConfigFetch{Kind: KindTalos, RemoteAddr: home},
			wantCode: "missing_uuid", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/seed route for a Talos configuration", state: StateConfiguring, pending: true,
			fetch:    ConfigFetch{Kind: KindNixOS, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "wrong_kind", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/unknown address", state: StateConfiguring, pending: false,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.9.9.9")},
			wantCode: "unknown_address", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/lost in a restart: distinct 410, request failed, journal", state: StateConfiguring, pending: false,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "config_lost", wantState: StateFailed, wantStatus: StatusFailed, wantJourn: "danger: provision request provision-aaaaaaaa failed: the pending configuration of node-a was lost"},
		{name: "refuse/lost, already recorded by the reconcile: still config_lost", state: StateFailed, pending: false,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "config_lost", wantState: StateFailed, wantStatus: StatusStaged},
		{name: "refuse/expired before the fetch", state: StateConfiguring, pending: true, expire: true,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "config_expired", wantState: StateConfiguring, wantStatus: StatusStaged},
		{name: "refuse/an active device asks again", state: StateActive, pending: false,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "config_delivered", wantState: StateActive, wantStatus: StatusStaged},
		{name: "refuse/no request", state: StateNone, pending: false,
			fetch:    ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "no_pending_config", wantState: StateNone, wantStatus: StatusStaged},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status = StatusStaged
			d.Owned = Owned{State: r.state, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
			if r.state == StateFailed {
				d.Owned.Message = "provision request provision-aaaaaaaa failed: the pending configuration of node-a was lost when fleetd restarted; set desired_action=provision to provision again."
			}
			inv, inst := fleettest.NewInventory(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			if r.pending {
				putPending(t, s, d)
			}
			if r.expire {
				s.clock.Advance(2 * time.Hour)
			}
			cfg, _, err := s.FetchConfig(context.Background(), r.fetch)
			if r.wantCode == "" {
				if err != nil || string(cfg.Body) != "machine: {}" {
					t.Fatalf("FetchConfig = %q, %v; want the pending config", cfg.Body, err)
				}
			} else {
				ref, ok := AsRefusal(err)
				if !ok || ref.Code != r.wantCode {
					t.Fatalf("FetchConfig error %v, want refusal %s", err, r.wantCode)
				}
				if ref.Msg == "" {
					t.Error("refusal without a message")
				}
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState || got.Status != r.wantStatus {
				t.Errorf("state %q status %q, want %q %q", got.Owned.State, got.Status, r.wantState, r.wantStatus)
			}
			j := inv.JournalOf(12)
			if r.wantJourn == "" && len(j) != 0 || r.wantJourn != "" && (len(j) != 1 || !strings.Contains(j[0], r.wantJourn)) {
				t.Errorf("journal %q, want %q", j, r.wantJourn)
			}
			if r.pending && !r.expire && r.wantCode != "" && !s.hasPending(12) && r.wantCode != "config_expired" {
				t.Errorf("a refused fetch (%s) consumed the configuration", r.wantCode)
			}
		})
	}
}

// TestFetchConfigOnce: two fetches of one configuration: the first is delivered, the second gets
// 410 config_delivered.
func TestFetchConfigOnce(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Owned = Owned{State: StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	inv := fleettest.NewInventory(d)
	s := newTestService(inv, fleettest.NewInstaller())
	putPending(t, s, d)
	f := ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.5")}
	if _, _, err := s.FetchConfig(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.FetchConfig(context.Background(), f)
	if ref, ok := AsRefusal(err); !ok || ref.Code != "config_delivered" || ref.Class != RefusedGone {
		t.Fatalf("second fetch: %v, want 410 config_delivered", err)
	}
}

package fleet_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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

// gatedInventory holds the first Device read after arm() until release, telling entered when it
// got there, so that a test can keep a device's lock taken at a known point.
type gatedInventory struct {
	*fleettest.Inventory
	armed             atomic.Bool
	entered, released chan struct{}
}

func (g *gatedInventory) arm() {
	g.entered, g.released = make(chan struct{}), make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedInventory) Device(ctx context.Context, id int64) (Device, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.released
	}
	return g.Inventory.Device(ctx, id)
}

// TestFetchConfigWhileTheRequestEnds: a fetch that found its configuration by address and then
// waited for the device while the Workflow's failure ended the request (and dropped the
// configuration) is answered "nothing pending" — it does not wait for the device lock it holds
// itself — and the device stays usable.
func TestFetchConfigWhileTheRequestEnds(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = StatusStaged
	d.Owned = Owned{State: StateInstalling, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	inv := &gatedInventory{Inventory: fleettest.NewInventory(d)}
	s := newTestService(inv, fleettest.NewInstaller())
	putPending(t, s, d)

	// The Workflow watch reports the failure and holds the device's lock in its read.
	inv.arm()
	ended := make(chan error, 1)
	go func() {
		_, err := s.WorkflowChanged(context.Background(), 12, WorkflowStatus{Name: d.Owned.Workflow, Phase: WorkflowFailed,
			FailedAction: "write-image", Message: "simulated"})
		ended <- err
	}()
	<-inv.entered
	// The node fetches meanwhile: its configuration is still pending, so it waits for the lock.
	fetched := make(chan error, 1)
	go func() {
		_, _, err := s.FetchConfig(context.Background(), ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID,
			RemoteAddr: netip.MustParseAddr("10.0.0.5")})
		fetched <- err
	}()
	waitForGoroutine(t, "fleet.(*Service).FetchConfig", "fleet.(*deviceLocks).lock")
	close(inv.released)
	if err := <-ended; err != nil {
		t.Fatalf("the Workflow's failure: %v", err)
	}
	select {
	case err := <-fetched:
		if ref, ok := AsRefusal(err); !ok || ref.Code != "no_pending_config" {
			t.Errorf("the fetch after the request ended: %v, want no_pending_config", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch never returned: it waits for the device lock it holds (deadlock)")
	}
	if got := inv.Get(12); got.Owned.State != StateFailed {
		t.Errorf("fleet_state %s, want failed (the Workflow's failure)", got.Owned.State)
	}
	if _, err := s.Reconcile(context.Background(), 12); err != nil { // the device's lock is free again
		t.Errorf("reconcile after the fetch: %v", err)
	}
}

// waitForGoroutine waits until a goroutine's stack holds every one of the frames (by substring).
func waitForGoroutine(t *testing.T, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for range 2000 {
		stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
		for _, g := range stacks {
			if all(g, frames) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no goroutine reached %v", frames)
}

func all(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestPendingConfigsGauge: fleetd_pending_configs counts the configurations waiting in memory
// at every scrape: one after the attestation rendered it, none once it was fetched.
func TestPendingConfigsGauge(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Owned = Owned{State: StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	clock := fleettest.NewClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	pending, err := NewPending(PendingConfig{Clock: clock, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := NewService(Config{FleetdURL: "http://spore:8080"}, Deps{Inventory: fleettest.NewInventory(d), Installer: fleettest.NewInstaller(),
		Catalog: fleettest.Catalog(), Clock: clock, Pending: pending, Random: rand.New(rand.NewSource(1)), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := testService{Service: svc, clock: clock, pending: pending}
	gauge := func(want int) {
		t.Helper()
		exp := fmt.Sprintf("# HELP fleetd_pending_configs Configurations rendered and waiting in memory for their one fetch.\n"+
			"# TYPE fleetd_pending_configs gauge\nfleetd_pending_configs %d\n", want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "fleetd_pending_configs"); err != nil {
			t.Error(err)
		}
	}
	gauge(0)
	putPending(t, s, d)
	gauge(1)
	if _, _, err := s.FetchConfig(context.Background(), ConfigFetch{Kind: KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.5")}); err != nil {
		t.Fatal(err)
	}
	gauge(0)
}

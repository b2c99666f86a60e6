package fleet_test

import (
	"context"
	"errors"
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

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/render"
)

func TestFetchConfig(t *testing.T) {
	home := netip.MustParseAddr("10.0.0.5")
	talos := func(uuid string) fleet.ConfigFetch {
		return fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: uuid, RemoteAddr: home}
	}
	type row struct {
		name       string
		state      fleet.State
		attested   bool // fleet_identity holds the request's identity material
		mod        func(*fleet.Device)
		advance    time.Duration // the clock's move before the fetch (the configuration's TTL is an hour)
		fetch      fleet.ConfigFetch
		wantCode   string // "" = delivered
		wantMsg    string // in the refusal's message
		wantState  fleet.State
		wantStatus fleet.Status
		wantJourn  string
	}
	rows := []row{
		{name: "ok/delivered once: active, journal names what, to whom and for which request", state: fleet.StateConfiguring, attested: true,
			fetch:     talos(strings.ToUpper(attestedUUID)),
			wantState: fleet.StateActive, wantStatus: fleet.StatusActive, wantJourn: "success: Delivered Talos worker config for node-a"},
		{name: "refuse/wrong UUID: not consumed", state: fleet.StateConfiguring, attested: true,
			fetch:    talos("00000000-0000-0000-0000-000000000000"),
			wantCode: "wrong_uuid", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "refuse/no uuid in the query", state: fleet.StateConfiguring, attested: true,
			fetch:    fleet.ConfigFetch{Kind: fleet.KindTalos, RemoteAddr: home},
			wantCode: "missing_uuid", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "refuse/seed route for a Talos configuration", state: fleet.StateConfiguring, attested: true,
			fetch:    fleet.ConfigFetch{Kind: fleet.KindNixOS, ClaimedUUID: attestedUUID, RemoteAddr: home},
			wantCode: "wrong_kind", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "ok/fetched before Tinkerbell reported the install Workflow's success (or NoCloud during it)", state: fleet.StateInstalling, attested: true,
			fetch: talos(attestedUUID), wantState: fleet.StateActive, wantStatus: fleet.StatusActive, wantJourn: "success: Delivered"},
		{name: "refuse/unknown address", state: fleet.StateConfiguring, attested: true,
			fetch:    fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.9.9.9")},
			wantCode: "unknown_address", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "refuse/attested by an older fleetd (nothing in NetBox): distinct 410, request failed, journal", state: fleet.StateConfiguring,
			fetch:    talos(attestedUUID),
			wantCode: "config_lost", wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed,
			wantJourn: "danger: provision request provision-aaaaaaaa failed: its configuration was rendered by an older fleetd"},
		{name: "refuse/expired before the fetch: 410, request failed", state: fleet.StateConfiguring, attested: true, advance: 2 * time.Hour,
			fetch:    talos(attestedUUID),
			wantCode: "config_expired", wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantJourn: "danger: provision request provision-aaaaaaaa failed: the node did not fetch"},
		{name: "refuse/fetched at the very instant it expires: expired", state: fleet.StateConfiguring, attested: true, advance: time.Hour,
			fetch:    talos(attestedUUID),
			wantCode: "config_expired", wantState: fleet.StateFailed, wantStatus: fleet.StatusFailed, wantJourn: "danger: provision request provision-aaaaaaaa failed: the node did not fetch"},
		{name: "ok/fetched a nanosecond before it expires: delivered", state: fleet.StateConfiguring, attested: true, advance: time.Hour - time.Nanosecond,
			fetch: talos(attestedUUID), wantState: fleet.StateActive, wantStatus: fleet.StatusActive, wantJourn: "success: Delivered Talos worker config for node-a"},
		{name: "refuse/an active device asks again", state: fleet.StateActive, attested: true,
			fetch: talos(attestedUUID), wantCode: "config_delivered", wantState: fleet.StateActive, wantStatus: fleet.StatusStaged},
		{name: "refuse/fleet_state written back to configuring after the delivery: the status says delivered, not served twice",
			state: fleet.StateConfiguring, attested: true, mod: func(d *fleet.Device) { d.Status = fleet.StatusActive },
			fetch: talos(attestedUUID), wantCode: "config_delivered", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusActive},
		{name: "refuse/identity of an earlier request: nothing to serve", state: fleet.StateConfiguring, attested: true,
			mod:   func(d *fleet.Device) { d.Owned.Identity.Request = "provision-zzzzzzzz" },
			fetch: talos(attestedUUID), wantCode: "no_pending_config", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "refuse/identity written by a newer fleetd: named, not served", state: fleet.StateConfiguring, attested: true,
			mod:   func(d *fleet.Device) { d.Owned.Identity.Version = 2 },
			fetch: talos(attestedUUID), wantCode: "identity_unreadable", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "ok/with the fetch secret the attestation handed out", state: fleet.StateConfiguring, attested: true,
			mod:       func(d *fleet.Device) { d.Owned.Identity.FetchSecretSHA256 = fleet.FetchSecretHash("s3cr3t") },
			fetch:     fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, ClaimedSecret: "s3cr3t", RemoteAddr: home},
			wantState: fleet.StateActive, wantStatus: fleet.StatusActive, wantJourn: "bound by the attested SMBIOS UUID and the one-time fetch secret."},
		{name: "refuse/no fetch secret where one was handed out: not consumed", state: fleet.StateConfiguring, attested: true,
			mod:   func(d *fleet.Device) { d.Owned.Identity.FetchSecretSHA256 = fleet.FetchSecretHash("s3cr3t") },
			fetch: talos(attestedUUID), wantCode: "fetch_secret_missing", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged,
			wantMsg: "the talos.config= URL must carry code=${code}"},
		{name: "refuse/no fetch secret on the seed route: the agent's file is named", state: fleet.StateConfiguring, attested: true,
			mod:   func(d *fleet.Device) { d.Owned.Identity.FetchSecretSHA256 = fleet.FetchSecretHash("s3cr3t") },
			fetch: fleet.ConfigFetch{Kind: fleet.KindNixOS, ClaimedUUID: attestedUUID, RemoteAddr: home}, wantCode: "fetch_secret_missing",
			wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged, wantMsg: "the install must pass the agent's fetch-secret file to the fetch"},
		{name: "refuse/another fetch secret: not consumed", state: fleet.StateConfiguring, attested: true,
			mod:      func(d *fleet.Device) { d.Owned.Identity.FetchSecretSHA256 = fleet.FetchSecretHash("s3cr3t") },
			fetch:    fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, ClaimedSecret: "s3cr3T", RemoteAddr: home},
			wantCode: "wrong_fetch_secret", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged},
		{name: "ok/a class that joins Kubernetes: joining, status active", state: fleet.StateConfiguring, attested: true,
			mod:       func(d *fleet.Device) { d.Declared.Class = "talos-member" },
			fetch:     talos(attestedUUID),
			wantState: fleet.StateJoining, wantStatus: fleet.StatusActive, wantJourn: "It joins the cluster: the request is done when Node node-a is Ready."},
		{name: "refuse/delivered to a joining node already", state: fleet.StateJoining, attested: true,
			mod:   func(d *fleet.Device) { d.Declared.Class, d.Status = "talos-member", fleet.StatusActive },
			fetch: talos(attestedUUID), wantCode: "config_delivered", wantState: fleet.StateJoining, wantStatus: fleet.StatusActive},
		{name: "refuse/renamed since its attestation: its certificates carry the old name, not served, not consumed", state: fleet.StateConfiguring, attested: true,
			mod:   func(d *fleet.Device) { d.Name = "node-r" },
			fetch: talos(attestedUUID), wantCode: "device_renamed", wantState: fleet.StateConfiguring, wantStatus: fleet.StatusStaged,
			wantMsg: "node-r was attested as node-a and renamed since"},
		{name: "refuse/no request", state: fleet.StateNone,
			fetch: talos(attestedUUID), wantCode: "no_pending_config", wantState: fleet.StateNone, wantStatus: fleet.StatusStaged,
			wantMsg: "no configuration is pending for node-a (fleet_state empty)"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Status = fleet.StatusStaged
			d.Owned = fleet.Owned{State: r.state, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
			if r.state == fleet.StateNone {
				d.Owned.Request, d.Owned.Workflow = "", ""
			}
			if r.attested {
				d = attested(d)
			}
			if r.mod != nil {
				r.mod(&d)
			}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			s.clock.Advance(r.advance)
			cfg, _, err := s.Delivery.FetchConfig(context.Background(), r.fetch)
			if r.wantCode == "" {
				if err != nil || !strings.Contains(string(cfg.Body), "machine:") {
					t.Fatalf("FetchConfig = %.40q, %v; want the rendered Talos config", cfg.Body, err)
				}
				files, err := render.DeliveredFiles(fleet.KindTalos, cfg.Body)
				if err != nil || len(files) != 2 || string(files[1].Data) != `{"KeyEncoding":1}` {
					t.Errorf("node files of the delivered config: %+v, %v; want lak.pem and lak.blob from fleet_identity", files, err)
				}
			} else {
				ref, ok := fleet.AsRefusal(err)
				if !ok || ref.Code != r.wantCode {
					t.Fatalf("FetchConfig error %v, want refusal %s", err, r.wantCode)
				}
				if ref.Msg == "" || !strings.Contains(ref.Msg, r.wantMsg) {
					t.Errorf("refusal message %q, want one saying %q", ref.Msg, r.wantMsg)
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
			for _, w := range append(j, got.Owned.Message) {
				if strings.Contains(strings.ToLower(w), attestedUUID) {
					t.Errorf("NetBox holds the SMBIOS UUID: %q (it is not published: NetBox keeps its hash only)", w)
				}
			}
		})
	}
}

// TestFetchConfigOnce: two fetches of one configuration, by two services on the same NetBox (a
// restart in between, or two instances): the first is delivered, the second gets 410
// config_delivered; and a fetch whose conditional write loses to another's delivery is told so.
func TestFetchConfigOnce(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	inv := fleettest.NewNetBox(attested(d))
	f := fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.5")}
	first, _, err := newTestService(inv, fleettest.NewInstaller()).Delivery.FetchConfig(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = newTestService(inv, fleettest.NewInstaller()).Delivery.FetchConfig(context.Background(), f)
	if ref, ok := fleet.AsRefusal(err); !ok || ref.Code != "config_delivered" || ref.Class != fleet.RefusedGone {
		t.Fatalf("second fetch: %v, want 410 config_delivered", err)
	}
	// The same configuration again from another service, while another fetch wins the write.
	d2 := d
	d2.ID, d2.Name, d2.Address = 13, "node-b", netip.MustParsePrefix("10.0.0.6/24")
	inv.Set(attested(d2))
	inv.ConflictOnce[13] = func(d *fleet.Device) { d.Owned.State, d.Status = fleet.StateActive, fleet.StatusActive } // the other fetch's delivery
	f.RemoteAddr = netip.MustParseAddr("10.0.0.6")
	_, _, err = newTestService(inv, fleettest.NewInstaller()).Delivery.FetchConfig(context.Background(), f)
	if ref, ok := fleet.AsRefusal(err); !ok || ref.Code != "config_delivered" {
		t.Fatalf("fetch that lost the conditional write: %v, want config_delivered", err)
	}
	if j := inv.JournalOf(13); len(j) != 0 {
		t.Errorf("the losing fetch journaled %q", j)
	}
	// Rendered again from NetBox, the configuration is the one the first fetch got.
	tok, err := fleettest.SealKeys().BootstrapToken(fleettest.SealKey().ID, d.ID, d.Owned.Request)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sharedRenderer().Render(attested(d), mustClass(t, "talos-worker"), fleet.NodeIdentity{UUID: attestedUUID, Serial: "SYS123",
		Files: attested(d).Owned.Identity.NodeFiles(), BootstrapToken: tok})
	if err != nil || string(again.Body) != string(first.Body) {
		t.Errorf("a second render of the same fields differs from the delivered one (%v)", err)
	}
}

func mustClass(t *testing.T, name string) fleet.Class {
	t.Helper()
	c, ok := fleettest.Catalog().Class(name)
	if !ok {
		t.Fatalf("no class %s", name)
	}
	return c
}

// gatedInventory holds the first Device read after arm() until release, telling entered when it
// got there, so that a test can keep a device's lock taken at a known point.
type gatedInventory struct {
	*fleettest.NetBox
	armed             atomic.Bool
	entered, released chan struct{}
}

func (g *gatedInventory) arm() {
	g.entered, g.released = make(chan struct{}), make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedInventory) Device(ctx context.Context, id int64) (fleet.Device, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.released
	}
	return g.NetBox.Device(ctx, id)
}

// TestFetchConfigWhileTheRequestEnds: a fetch that waits for the device's lock while the
// Workflow's failure ends the request is then answered from NetBox as it is (nothing pending), and
// the device stays usable.
func TestFetchConfigWhileTheRequestEnds(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	inv := &gatedInventory{NetBox: fleettest.NewNetBox(attested(d))}
	s := newTestService(inv, fleettest.NewInstaller())

	// The Workflow watch reports a failure and holds the device's lock in its read.
	inv.arm()
	ended := make(chan error, 1)
	go func() {
		_, err := s.Requests.WorkflowChanged(context.Background(), 12, fleet.WorkflowStatus{Name: d.Owned.Workflow, Phase: fleet.WorkflowFailed,
			FailedAction: "write-image", Message: "simulated"})
		ended <- err
	}()
	<-inv.entered
	fetched := make(chan error, 1)
	go func() {
		_, _, err := s.Delivery.FetchConfig(context.Background(), fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID,
			RemoteAddr: netip.MustParseAddr("10.0.0.5")})
		fetched <- err
	}()
	waitForGoroutine(t, "fleet.(*Delivery).FetchConfig", "fleet.(*deviceLocks).lock")
	inv.NetBox.Set(func() fleet.Device { x := inv.Get(12); x.Owned.State = fleet.StateInstalling; return x }()) // the failure applies to an installing provision
	close(inv.released)
	if err := <-ended; err != nil {
		t.Fatalf("the Workflow's failure: %v", err)
	}
	select {
	case err := <-fetched:
		if ref, ok := fleet.AsRefusal(err); !ok || ref.Code != "no_pending_config" {
			t.Errorf("the fetch after the request ended: %v, want no_pending_config", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch never returned")
	}
	if got := inv.Get(12); got.Owned.State != fleet.StateFailed {
		t.Errorf("fleet_state %s, want failed (the Workflow's failure)", got.Owned.State)
	}
	if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil { // the device's lock is free again
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

// TestPendingConfigsGauge: fleetd_pending_configs counts, at each reconcile, the provisions whose
// configuration waits for its fetch in NetBox: one after the attestation, none once fetched.
func TestPendingConfigsGauge(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa"}
	inv, inst := fleettest.NewNetBox(attested(d)), fleettest.NewInstaller()
	inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowSucceeded})
	clock := fleettest.NewClock(testEpoch)
	reg := prometheus.NewRegistry()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080"}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, Installer: inst,
		Catalog: fleettest.Catalog(), Clock: clock, Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(want int) {
		t.Helper()
		if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		exp := fmt.Sprintf("# HELP fleetd_pending_configs Provisions whose configuration waits for its one fetch, as NetBox had them at the last reconcile.\n"+
			"# TYPE fleetd_pending_configs gauge\nfleetd_pending_configs %d\n", want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "fleetd_pending_configs"); err != nil {
			t.Error(err)
		}
	}
	gauge(1)
	if _, _, err := s.Delivery.FetchConfig(context.Background(), fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.5")}); err != nil {
		t.Fatal(err)
	}
	gauge(0)
}

// TestFetchConfigJudgedOnOwnFields: a fetch is decided on fleetd's own values (docs/design.md §9):
// a copy read before the provision's claim, saved back whole just before the node's fetch, shows
// the older, delivered request (fleet_state active), and the fetch answered 410 config_delivered
// for a configuration never delivered, which the node need not ask for again (the chaos run, seed
// 371253945). The fetch's read carries the change log: fleetd's values are put back first and the
// configuration delivered. A refusal that stands on fleetd's own values is still answered, and a
// change log that cannot be read is a 5xx the node asks again after, not a refusal.
func TestFetchConfigJudgedOnOwnFields(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StateConfiguring, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa", LAKSerial: "0c2d"}
	fleetds := attested(d)
	old := fleetds // the copy: the request before, delivered; the status is not written back
	old.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-zzzzzzzz", Workflow: "node-a-provision-zzzzzzzz", LAKSerial: "0b1a"}
	delivered := fleetds
	delivered.Owned.State, delivered.Status = fleet.StateActive, fleet.StatusActive
	f := fleet.ConfigFetch{Kind: fleet.KindTalos, ClaimedUUID: attestedUUID, RemoteAddr: netip.MustParseAddr("10.0.0.5")}
	rows := []struct {
		name      string
		copyRead  fleet.Device // fleetd's write the owner's copy was read after, saved back after now
		now       fleet.Device // fleetd's last write
		logErr    error
		wantCode  string // "" = delivered
		wantError bool   // an error that is no refusal (a 5xx)
		wantState fleet.State
		wantJourn []string
	}{
		{name: "ok/a copy written back before the fetch: fleetd's fields back, delivered", copyRead: old, now: fleetds,
			wantState: fleet.StateActive,
			wantJourn: []string{"warning: Fields owned by fleetd (fleet_state, fleet_request, fleet_workflow, lak_serial, fleet_identity, fleet_seal) were written by owner",
				"success: Delivered Talos worker config for node-a"}},
		{name: "refuse/delivered on fleetd's own values: 410 stands", now: delivered,
			wantCode: "config_delivered", wantState: fleet.StateActive},
		{name: "error/the change log cannot be read: 5xx, nothing written", copyRead: old, now: fleetds, logErr: errors.New("netbox down"),
			wantError: true, wantState: fleet.StateActive},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			inv := fleettest.NewNetBox(r.now)
			if r.copyRead.ID != 0 {
				inv = fleettest.NewNetBox(r.copyRead)
				copyRead := inv.Get(12)
				inv.Set(r.now)
				saveCopy(inv, fleettest.Owner, copyRead)
			}
			s := newTestService(inv, fleettest.NewInstaller())
			inv.HistoryErr = r.logErr
			cfg, _, err := s.Delivery.FetchConfig(context.Background(), f)
			ref, refused := fleet.AsRefusal(err)
			switch {
			case r.wantError:
				if err == nil || refused {
					t.Errorf("fetch: %v, want an error that is no refusal", err)
				}
			case r.wantCode != "":
				if !refused || ref.Code != r.wantCode {
					t.Errorf("fetch: %v, want the refusal %s", err, r.wantCode)
				}
			case err != nil || len(cfg.Body) == 0:
				t.Errorf("fetch: %v, want the configuration delivered", err)
			}
			if got := inv.Get(12); got.Owned.State != r.wantState {
				t.Errorf("fleet_state %q, want %q", got.Owned.State, r.wantState)
			}
			j := inv.JournalOf(12)
			if len(j) != len(r.wantJourn) {
				t.Fatalf("journal %q, want %d entries like %q", j, len(r.wantJourn), r.wantJourn)
			}
			for i, w := range r.wantJourn {
				if !strings.Contains(j[i], w) {
					t.Errorf("journal entry %d %q, want it to say %q", i, j[i], w)
				}
			}
		})
	}
}

package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// gauge reads one unlabelled gauge or counter (or its series of one label value) from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(labels) == 0 || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == labels[0] {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// newRegisteredService is newTestService with its metrics on reg.
func newRegisteredService(inv *fleettest.NetBox, reg *prometheus.Registry, keys *fleet.SealKeys) testService {
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: keys, NetBox: inv, ChangeLog: inv, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(),
			Clock: clock, Renderer: sharedRenderer(), Random: strings.NewReader(strings.Repeat("r", 4096)), Registry: reg})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock}
}

// TestUntrusted: a device whose values fleetd cannot vouch for and whose change log holds no write
// of fleetd's to put back is marked untrusted — fleet_state untrusted, every other field fleetd
// owns cleared, a danger journal entry, fleetd_untrusted_devices — once a listing showed that few
// seals fail (before that, and while many do, the seal brake holds: decisions are refused,
// nothing is written). Its boot checks are refused; only an owner's new request brings it back.
func TestUntrusted(t *testing.T) {
	forge := func(inv *fleettest.NetBox) { // no write of fleetd's in the log: forged from the start
		inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned.LAKSerial, d.Owned.State = "0bad", fleet.StateActive })
	}
	t.Run("refuse/before the first listing the brake holds: nothing written", func(t *testing.T) {
		inv := fleettest.NewNetBox(wipedNode())
		s := newTestService(inv, fleettest.NewInstaller())
		forge(inv)
		saves := len(inv.Changes(12))
		_, err := s.CheckOwnedFields(context.Background(), 12)
		if r, ok := fleet.AsRefusal(err); !ok || r.Code != "owned_fields_untrusted" || !strings.Contains(err.Error(), "seal brake holds") {
			t.Fatalf("check: %v, want owned_fields_untrusted with the brake named", err)
		}
		if len(inv.Changes(12)) != saves || len(inv.JournalOf(12)) != 0 {
			t.Errorf("the brake held, but fleetd wrote: %d saves, journal %q", len(inv.Changes(12))-saves, inv.JournalOf(12))
		}
	})
	t.Run("ok/marked untrusted, then brought back by the owner's provision", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		inv := fleettest.NewNetBox(wipedNode())
		s := newRegisteredService(inv, reg, fleettest.SealKeys())
		ctx := context.Background()
		forge(inv)
		if _, err := s.Requests.ReconcileAll(ctx); err != nil { // its listing shows few seals fail, then the backstop checks
			t.Fatal(err)
		}
		got := inv.Get(12)
		if got.Owned.State != fleet.StateUntrusted || got.Owned.LAKSerial != "" || got.Owned.Request != "" || !strings.Contains(got.Owned.Message, "cannot vouch") {
			t.Fatalf("after the reconcile: %+v, want untrusted with everything else cleared", got.Owned)
		}
		if j := inv.JournalOf(12); len(j) != 1 || !strings.HasPrefix(j[0], "danger: fleetd cannot vouch for the fields it owns on node-a: ") ||
			!strings.Contains(j[0], "written by admin") {
			t.Errorf("journal %q, want one danger entry naming the writer", j)
		}
		if _, err := s.Requests.ReconcileAll(ctx); err != nil {
			t.Fatal(err)
		}
		if n := gauge(t, reg, "fleetd_untrusted_devices"); n != 1 {
			t.Errorf("fleetd_untrusted_devices = %v, want 1", n)
		}
		if n := gauge(t, reg, "fleetd_owned_field_writes_total", "untrusted"); n != 1 {
			t.Errorf("fleetd_owned_field_writes_total{outcome=untrusted} = %v, want 1", n)
		}
		inv.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionProvision })
		if out, err := s.Requests.Reconcile(ctx, 12); err != nil || out.Result != "accepted" {
			t.Fatalf("the owner's provision: %+v, %v", out, err)
		}
		if got := inv.Get(12); got.Owned.State != fleet.StatePending {
			t.Errorf("after the owner's provision: fleet_state %s, want pending", got.Owned.State)
		}
	})
	t.Run("refuse/while many seals fail the brake holds", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		var ds []fleet.Device
		for i := range 4 {
			d := wipedNode()
			d.ID, d.Name = int64(20+i), "node-"+string(rune('a'+i))
			ds = append(ds, d)
		}
		inv := fleettest.NewNetBox(ds...)
		s := newRegisteredService(inv, reg, fleettest.SealKeys())
		for i := range 3 { // three of four: a key deployed wrong looks like this, not a forgery
			inv.WriteAs("admin", int64(20+i), func(d *fleet.Device) { d.Owned.Message = "forged" })
		}
		for range 2 {
			_, _ = s.Requests.ReconcileAll(context.Background())
		}
		for i := range 3 {
			if got := inv.Get(int64(20 + i)); got.Owned.State == fleet.StateUntrusted {
				t.Errorf("node %d marked untrusted while the brake holds", 20+i)
			}
		}
		if n := gauge(t, reg, "fleetd_seal_brake"); n != 1 {
			t.Errorf("fleetd_seal_brake = %v, want 1", n)
		}
		if n := gauge(t, reg, "fleetd_seal_failing_devices"); n != 3 {
			t.Errorf("fleetd_seal_failing_devices = %v, want 3", n)
		}
	})
}

// TestUpgradeSealsWhatFleetdWroteLast: the first fleetd that seals finds devices whose values an
// older fleetd wrote unsealed. The periodic reconcile seals those whose change log shows fleetd
// saved them last, or that no save within the log's retention touched (and journals which), and
// reports the others — values another user saved while this hole was open — as untrusted instead
// of vouching for them.
func TestUpgradeSealsWhatFleetdWroteLast(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b, c := activeNode(), activeNode(), activeNode()
	b.ID, b.Name, c.ID, c.Name = 13, "node-b", 14, "node-c"
	inv := fleettest.NewNetBox(a, b, c)
	s := newRegisteredService(inv, reg, fleettest.SealKeys())
	unsealed := func(d *fleet.Device) { d.Seal = "" } // an older fleetd's write
	inv.WriteAs(fleettest.ServiceUser, 13, unsealed)
	inv.TrimHistory(s.clock.Now().Add(1)) // node-b's saves are older than NetBox keeps its log
	s.clock.Advance(1)
	inv.WriteAs(fleettest.ServiceUser, 12, unsealed)
	inv.WriteAs(fleettest.ServiceUser, 14, unsealed)
	inv.WriteAs("admin", 14, func(d *fleet.Device) { d.Owned.LAKSerial = "0bad" }) // while the hole was open
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys := fleettest.SealKeys()
	for id, want := range map[int64]string{12: "fleetd wrote them last", 13: "no save within NetBox's change log touched them"} {
		got := inv.Get(id)
		if c := keys.Verify(id, got.Owned, got.Seal); c.Result != fleet.SealValid || got.Owned.LAKSerial != "0b01" {
			t.Errorf("device %d after the upgrade: seal %s, lak_serial %q; want its values sealed as they were", id, c.Result, got.Owned.LAKSerial)
		}
		if j := inv.JournalOf(id); len(j) != 1 || !strings.HasPrefix(j[0], "info: fleetd sealed the values of its fields") || !strings.Contains(j[0], want) {
			t.Errorf("device %d journal %q, want one entry saying %q", id, j, want)
		}
	}
	if got := inv.Get(14); got.Owned.State != fleet.StateUntrusted || got.Owned.LAKSerial != "" {
		t.Errorf("node-c, saved by admin before the upgrade: %+v, want untrusted, cleared", got.Owned)
	}
	if n := gauge(t, reg, "fleetd_owned_field_writes_total", "sealed"); n != 2 {
		t.Errorf("fleetd_owned_field_writes_total{outcome=sealed} = %v, want 2", n)
	}
	if n := gauge(t, reg, "fleetd_sealed_devices", "none"); n != 3 {
		t.Errorf("fleetd_sealed_devices{key=none} after the first reconcile = %v, want the 3 its listing found unsealed", n)
	}
	if _, err := s.Requests.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, none := gauge(t, reg, "fleetd_sealed_devices", "test"), gauge(t, reg, "fleetd_sealed_devices", "none"); n != 3 || none != 0 {
		t.Errorf("fleetd_sealed_devices: test %v none %v, want 3 and 0", n, none)
	}
}

// TestKeyRotation: a device that stays idle through a whole key rotation — the new key added to
// verify, then made the signing key (the reconcile seals every device again with it, until
// fleetd_sealed_devices has none left under the old one), then the old key dropped — is still
// trusted at the end. A key dropped too early is a deployment problem, not a forgery: a device
// sealed with it is refused (seal_key_unknown) and counted, never written or marked untrusted.
func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	old := fleettest.SealKey()
	next := fleet.SealKey{ID: "k2", Secret: []byte(strings.Repeat("2", 32))}
	ring := func(keys ...fleet.SealKey) *fleet.SealKeys {
		k, err := fleet.NewSealKeys(keys...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	inv := fleettest.NewNetBox(wipedNode()) // sealed with the old key; idle throughout
	t.Run("refuse/the old key dropped before the reseal", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s := newRegisteredService(inv, reg, ring(next))
		saves := len(inv.Changes(12))
		_, err := s.Requests.Reconcile(ctx, 12)
		if r, ok := fleet.AsRefusal(err); !ok || r.Code != "seal_key_unknown" || !strings.Contains(err.Error(), "names key test") {
			t.Errorf("reconcile: %v, want seal_key_unknown naming key test", err)
		}
		for range 2 {
			_, _ = s.Requests.ReconcileAll(ctx)
		}
		if len(inv.Changes(12)) != saves || inv.Get(12).Owned.State != fleet.StateWiped {
			t.Errorf("fleetd wrote a device sealed with a key it lacks: %d saves, state %s", len(inv.Changes(12))-saves, inv.Get(12).Owned.State)
		}
		if n := gauge(t, reg, "fleetd_seal_unknown_key_devices"); n != 1 {
			t.Errorf("fleetd_seal_unknown_key_devices = %v, want 1", n)
		}
	})
	// 1. The new key, verify only: nothing changes.
	s := newRegisteredService(inv, prometheus.NewRegistry(), ring(old, next))
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if c := ring(old).Verify(12, inv.Get(12).Owned, inv.Get(12).Seal); c.Result != fleet.SealValid {
		t.Fatalf("step 1 resealed the device: %+v", c)
	}
	// 2. The new key signs: the reconcile seals the idle device again with it.
	reg := prometheus.NewRegistry()
	s = newRegisteredService(inv, reg, ring(next, old))
	for range 2 {
		if _, err := s.Requests.ReconcileAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, o := gauge(t, reg, "fleetd_sealed_devices", "k2"), gauge(t, reg, "fleetd_sealed_devices", "test"); n != 1 || o != 0 {
		t.Errorf("after the reseal: fleetd_sealed_devices k2 %v, test %v; want 1 and 0", n, o)
	}
	if j := inv.JournalOf(12); len(j) != 0 {
		t.Errorf("a reseal journals nothing: %q", j)
	}
	// 3. The old key dropped: the idle device is still fleetd's.
	s = newRegisteredService(inv, prometheus.NewRegistry(), ring(next))
	d, err := s.ReadDevice(ctx, 12)
	if err != nil || d.Trust.Verdict != fleet.VerdictTrusted || d.Owned.State != fleet.StateWiped {
		t.Errorf("after the rotation: %s (%s), state %s, %v; want trusted", d.Trust.Verdict, d.Trust.Reason, d.Owned.State, err)
	}
	// A key lost for good (docs/operate.md, "Backup and recovery"): the owner clears fleet_seal,
	// fleetd's own sealed write in the log cannot be verified, so the device is marked untrusted,
	// never trusted on the log alone; the owner's provision brings it back.
	t.Run("ok/a key lost for good: the seal cleared, marked untrusted, provisioned again", func(t *testing.T) {
		inv := fleettest.NewNetBox()
		inv.Set(wipedNode()) // fleetd's write, sealed with the key about to be lost
		s := newRegisteredService(inv, prometheus.NewRegistry(), ring(next))
		if _, err := s.Requests.Reconcile(ctx, 12); !isRefusal(err, "seal_key_unknown") {
			t.Fatalf("before the seal is cleared: %v, want seal_key_unknown", err)
		}
		inv.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Seal = "" })
		if _, err := s.Requests.ReconcileAll(ctx); err != nil {
			t.Fatal(err)
		}
		if got := inv.Get(12); got.Owned.State != fleet.StateUntrusted || got.Owned.Request != "" {
			t.Fatalf("after the seal was cleared: %+v, want untrusted with everything else cleared", got.Owned)
		}
		inv.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionProvision })
		if out, err := s.Requests.Reconcile(ctx, 12); err != nil || out.Result != "accepted" {
			t.Fatalf("the owner's provision: %+v, %v", out, err)
		}
		if got := inv.Get(12); got.Owned.State != fleet.StatePending || ring(next).Verify(12, got.Owned, got.Seal).Result != fleet.SealValid {
			t.Errorf("after the owner's provision: fleet_state %s, seal %q; want pending, sealed with k2", got.Owned.State, got.Seal)
		}
	})
}

// isRefusal reports whether err is a refusal with code.
func isRefusal(err error, code string) bool {
	r, ok := fleet.AsRefusal(err)
	return ok && r.Code == code
}

// TestEveryWriteChangesTheSeal: two writes of the same values within one tick of the clock (here
// a clock that does not move) still carry two seals, so NetBox logs both (it logs no save that
// changed nothing) and the change log's newest entry is always the device's last save of
// fleetd's: the trust check then needs no second read of the log.
func TestEveryWriteChangesTheSeal(t *testing.T) {
	inv := fleettest.NewNetBox(wipedNode())
	s := newTestService(inv, fleettest.NewInstaller())
	msg := "the same"
	for range 2 {
		d, err := s.ReadDevice(context.Background(), 12)
		if err != nil {
			t.Fatal(err)
		}
		if _, wrote, err := s.UpdateIfMatch(context.Background(), d, func(fleet.Device) (fleet.Patch, bool, error) {
			return fleet.Patch{Message: &msg}, true, nil
		}); err != nil || !wrote {
			t.Fatalf("write: %v, %v", wrote, err)
		}
	}
	if h := inv.Changes(12); len(h) != 2 || h[0].After.Seal == h[1].After.Seal {
		t.Errorf("%d saves logged, seals %q; want two, each with its own seal", len(h), func() []string {
			var out []string
			for _, ch := range h {
				out = append(out, ch.After.Seal)
			}
			return out
		}())
	}
}

// TestSealGaugesBeforeTheFirstListing: a fleetd that has not listed the devices yet already has
// fleetd_sealed_devices for each of its keys and for none, at 0: the series exist from fleetd's
// start, not from its first reconcile.
func TestSealGaugesBeforeTheFirstListing(t *testing.T) {
	reg := prometheus.NewRegistry()
	newRegisteredService(fleettest.NewNetBox(activeNode()), reg, fleettest.SealKeys())
	for _, key := range []string{"test", "none"} {
		if n := gauge(t, reg, "fleetd_sealed_devices", key); n != 0 {
			t.Errorf("ok/fleetd_sealed_devices{key=%s} before any listing = %v, want 0 (-1: no series)", key, n)
		}
	}
}

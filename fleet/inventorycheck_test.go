package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/pki"
)

const otherEK = "1111111111111111111111111111111111111111111111111111111111111111"

// agreeing is an active node whose facts, learned at its attestation an hour ago and seen again
// at its boot check ten minutes ago, are what NetBox declares.
func agreeing(id int64, name string) fleet.Device {
	d := fleettest.Declared(id, name)
	d.Status, d.Owned.State, d.Owned.Request = fleet.StatusActive, fleet.StateActive, "provision-abcdefgh"
	d = fleettest.Attested(d, "4c4c4544-0042-3510-8052-b4c04f4e5a31", testEpoch.Add(-time.Hour), time.Hour)
	d.Owned.Identity.EKSHA256 = fleettest.EKHash
	d.Owned.LastBootCheck = testEpoch.Add(-10 * time.Minute)
	at := testEpoch.Add(-time.Hour)
	d.Owned.Facts = layout.Facts{Version: layout.FactsVersion,
		Proved: layout.ProvedFacts{EKSHA256: fleettest.EKHash, Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}},
		Claimed: layout.ClaimedFacts{SMBIOSUUIDSHA256: fleet.UUIDHash("4c4c4544-0042-3510-8052-b4c04f4e5a31"), MAC: "3c:ec:ef:4c:4f:54",
			Disks:      []layout.FactDisk{{Serial: "S4EWNX0R123456", Path: "/dev/disk/by-id/ata-X_S4EWNX0R123456"}, {Serial: "DATA1", Path: "/dev/disk/by-id/ata-X_DATA1"}},
			DisksFound: 2, Learned: layout.Learned{Since: at, Source: layout.FactsFromEnrollment}}}
	return d
}

func inventoryService(t *testing.T, log *fleettest.ChangeLog, ds ...fleet.Device) (*fleet.Service, *fleettest.NetBox) {
	s, inv, _ := inventoryServiceReg(t, log, ds...)
	return s, inv
}

func inventoryServiceReg(t *testing.T, log *fleettest.ChangeLog, ds ...fleet.Device) (*fleet.Service, *fleettest.NetBox, *prometheus.Registry) {
	t.Helper()
	inv := fleettest.NewNetBox(ds...)
	reg := prometheus.NewRegistry()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, ChangeLog: log, Registry: reg, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(),
			Clock: fleettest.NewClock(testEpoch), Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	return s, inv, reg
}

// TestInventoryMetric: fleetd_inventory_differences has no series until a check of the whole
// fleet sets it by kind (every kind) and counts itself; a check of named devices changes neither;
// a failed check is counted as an error and keeps the gauge.
func TestInventoryMetric(t *testing.T) {
	d := agreeing(2, "node-b")
	d.Owned.Facts.Claimed.MAC = "02:f6:00:00:00:01"
	log := &fleettest.ChangeLog{}
	s, _, reg := inventoryServiceReg(t, log, agreeing(1, "node-a"), d)
	gauge := func(kind string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "fleetd_inventory_differences" && m.GetLabel()[0].GetValue() == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if gauge("mac_changed") != -1 {
		t.Errorf("before the first check of the whole fleet the gauge is %v, want no series (not a 0 that says the fleet agrees)", gauge("mac_changed"))
	}
	if _, err := s.Review.InventoryCheck(context.Background(), []string{"node-b"}); err != nil || gauge("mac_changed") != -1 {
		t.Errorf("a named check set the gauge: %v, %v", gauge("mac_changed"), err)
	}
	if _, err := s.Review.InventoryCheck(context.Background(), nil); err != nil || gauge("mac_changed") != 1 || gauge("disk_not_found") != 0 {
		t.Errorf("after the fleet's check: mac_changed %v, disk_not_found %v, %v", gauge("mac_changed"), gauge("disk_not_found"), err)
	}
	log.Err = errDown
	_, _ = s.Review.InventoryCheck(context.Background(), nil)
	if gauge("mac_changed") != 1 {
		t.Errorf("a failed check changed the gauge")
	}
}

// TestRunInventoryCheck: fleetd serve's loop checks the whole fleet first after its first delay, not
// at start, where it would add to the start's own NetBox reads (docs/operate.md).
func TestRunInventoryCheck(t *testing.T) {
	log := &fleettest.ChangeLog{}
	s, _, reg := inventoryServiceReg(t, log, agreeing(1, "node-a"))
	series := func() float64 {
		n, err := testutil.GatherAndCount(reg, "fleetd_inventory_differences")
		if err != nil {
			t.Fatal(err)
		}
		return float64(n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Review.RunInventoryCheck(ctx, time.Hour, time.Hour) }()
	cancel()
	if err := <-done; err != nil || len(log.Queries) != 0 || series() != 0 {
		t.Fatalf("stopped before its first delay: %v, %d change-log reads, %v gauge series; want no check", err, len(log.Queries), series())
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- s.Review.RunInventoryCheck(ctx, time.Millisecond, time.Hour) }()
	for end := time.Now().Add(10 * time.Second); series() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no check of the whole fleet after the first delay")
		}
	}
	if n := series(); n != float64(len(fleet.DifferenceKinds)) {
		t.Errorf("%v gauge series after the first check, want every kind (%d)", n, len(fleet.DifferenceKinds))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunInventoryCheck = %v after its context ended", err)
	}
}

// TestInventoryDifferences plants each kind of difference on its own device and finds exactly it,
// with the evidence's time; a device that agrees has no line, and the check writes nothing.
func TestInventoryDifferences(t *testing.T) {
	type row struct {
		name   string
		change func(*fleet.Device)
		kind   fleet.DifferenceKind
		at     time.Time
		detail string
	}
	seen := testEpoch.Add(-10 * time.Minute) // the boot check saw the facts again
	rows := []row{
		{"differ/disk-not-found", func(d *fleet.Device) { d.Owned.Facts.Claimed.Disks[0].Serial = "NEWDISK1" }, fleet.DiffDiskNotFound, seen, `disk_serial "S4EWNX0R123456" is not among the 2 disks`},
		{"differ/disk-found-twice", func(d *fleet.Device) { d.Owned.Facts.Claimed.Disks[1].Serial = "S4EWNX0R123456" }, fleet.DiffDiskTwice, seen, "is on 2 of the machine's disks"},
		{"differ/mac", func(d *fleet.Device) { d.Owned.Facts.Claimed.MAC = "02:f6:00:00:00:01" }, fleet.DiffMAC, seen, "reported MAC 02:f6:00:00:00:01, which NetBox does not declare (3c:ec:ef:4c:4f:54)"},
		{"differ/uuid", func(d *fleet.Device) {
			d.Owned.Facts.Claimed.SMBIOSUUIDSHA256 = fleet.UUIDHash("00000000-0000-4000-8000-000000000001")
		}, fleet.DiffUUID, seen, "is not the one attested when its identity was issued"},
		{"differ/ek-undeclared", func(d *fleet.Device) { d.Owned.Facts.Proved.EKSHA256 = otherEK }, fleet.DiffEK, seen, "which ek_sha256 does not declare"},
		{"differ/ek-not-the-identity's", func(d *fleet.Device) {
			d.Owned.Facts.Proved.EKSHA256 = otherEK
			d.Declared.EKHashes = append(d.Declared.EKHashes, otherEK)
		}, fleet.DiffEK, seen, "they belong to another TPM"},
		{"differ/tpm-12", func(d *fleet.Device) { d.Declared.TPM = fleet.TPM12 }, fleet.DiffTPM, seen, "tpm declares 1.2"},
		{"differ/ek-certificate", func(d *fleet.Device) {
			d.Declared.EKCert = fleet.EKCertNone
			d.Owned.Facts.Proved.EKIssuer = "CN=swtpm-localca"
		}, fleet.DiffTPM, seen, `ek_certificate declares none, and the machine's TPM has an EK certificate issued by "CN=swtpm-localca"`},
		{"differ/boot-checks-stopped", func(d *fleet.Device) { d.Owned.LastBootCheck = testEpoch.Add(-4 * time.Hour) }, fleet.DiffBootChecksStopped, testEpoch.Add(-4 * time.Hour), "its last accepted boot check was 4h0m0s ago, longer than 3h0m0s"},
		{"differ/facts-unreadable", func(d *fleet.Device) {
			d.Owned.Facts, d.Owned.FactsUnreadable = layout.Facts{}, "fleet_facts is not fleetd's facts"
		}, fleet.DiffFactsUnreadable, time.Time{}, "fleet_facts cannot be read"},
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := agreeing(int64(i+2), "node-x")
			r.change(&d)
			ok := agreeing(1, "node-ok")
			s, inv := inventoryService(t, &fleettest.ChangeLog{}, ok, d)
			before := []fleet.Device{inv.Get(1), inv.Get(d.ID)}
			rep, err := s.Review.InventoryCheck(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Devices) != 2 || rep.Devices[0].Device != "node-ok" || rep.Devices[0].Result != fleet.InventoryAgrees || len(rep.Devices[0].Differences) != 0 {
				t.Fatalf("the agreeing device: %+v", rep.Devices)
			}
			got := rep.Devices[1]
			if got.Result != fleet.InventoryDiffers || len(got.Differences) != 1 {
				t.Fatalf("%s: %+v, want one %s", d.Name, got, r.kind)
			}
			diff := got.Differences[0]
			if diff.Kind != r.kind || !diff.At.Equal(r.at) || !strings.Contains(diff.Detail, r.detail) {
				t.Errorf("difference %+v, want %s at %s with %q", diff, r.kind, r.at, r.detail)
			}
			if !rep.Differs() || rep.Count()[r.kind] != 1 {
				t.Errorf("Differs %v, count %v", rep.Differs(), rep.Count())
			}
			after := []fleet.Device{inv.Get(1), inv.Get(d.ID)}
			if !reflect.DeepEqual(before, after) || len(inv.JournalOf(1))+len(inv.JournalOf(d.ID)) != 0 {
				t.Errorf("the check wrote: %+v", after)
			}
		})
	}
}

// TestInventoryAgrees: a fleet whose every device agrees (or has no facts yet) has no line.
func TestInventoryAgrees(t *testing.T) {
	planned := fleettest.Declared(3, "node-new")
	s, _ := inventoryService(t, &fleettest.ChangeLog{}, agreeing(1, "node-a"), agreeing(2, "node-b"), planned)
	rep, err := s.Review.InventoryCheck(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fleet.InventoryResult{"node-a": fleet.InventoryAgrees, "node-b": fleet.InventoryAgrees, "node-new": fleet.InventoryNoFacts}
	for _, d := range rep.Devices {
		if d.Result != want[d.Device] || len(d.Differences)+len(d.Stale) != 0 {
			t.Errorf("%s: %+v, want %s and no line", d.Device, d, want[d.Device])
		}
	}
	if rep.Differs() || len(rep.Devices) != 3 {
		t.Errorf("report %+v", rep)
	}
}

// TestInventoryStale: facts last seen before the owner changed the declaration are stale, not a
// difference; fleetd's own saves and a desired_action are no declaration change.
func TestInventoryStale(t *testing.T) {
	d := agreeing(1, "node-a")
	d.Declared.DiskSerial = "NEWSERIAL"                   // the owner declared the new disk...
	d.Owned.LastBootCheck = testEpoch.Add(-2 * time.Hour) // ...after the machine was last seen
	d.Owned.Facts.Proved.Since, d.Owned.Facts.Claimed.Since = testEpoch.Add(-3*time.Hour), testEpoch.Add(-3*time.Hour)
	before, after := d, d
	before.Declared.DiskSerial = "S4EWNX0R123456"
	request := d
	request.Declared.DesiredAction = fleet.ActionAttest
	log := &fleettest.ChangeLog{Changes: []fleet.DeviceChange{
		{DeviceID: 1, User: "admin", Time: testEpoch.Add(-30 * time.Minute), Before: d, After: request}, // a request only
		{DeviceID: 1, User: "owner", Time: testEpoch.Add(-time.Hour), Before: before, After: after},
		{DeviceID: 1, User: "fleetd", Time: testEpoch.Add(-20 * time.Minute), Before: before, After: after},
	}}
	s, _ := inventoryService(t, log, d)
	rep, err := s.Review.InventoryCheck(context.Background(), []string{"node-a"})
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Devices[0]
	if got.Result != fleet.InventoryStale || len(got.Differences) != 0 || len(got.Stale) != 2 ||
		!got.DeclaredAt.Equal(testEpoch.Add(-time.Hour)) || got.Stale[0].By != "owner" {
		t.Errorf("stale facts: %+v", got)
	}
	if q := log.Queries[0]; q.ExceptUser != "fleetd" || !q.Since.Equal(testEpoch.Add(-3*time.Hour)) {
		t.Errorf("change log query %+v", q)
	}

	// A MAC the owner changed after the facts is a declaration change too.
	m := agreeing(2, "node-b")
	m.MACs = []fleet.MAC{"02:aa:00:00:00:01"}
	log = &fleettest.ChangeLog{MACs: []fleet.MACChange{{User: "owner", Time: testEpoch.Add(-5 * time.Minute), Before: "3c:ec:ef:4c:4f:54", After: "02:aa:00:00:00:01"}}}
	s, _ = inventoryService(t, log, m)
	rep, err = s.Review.InventoryCheck(context.Background(), nil)
	if err != nil || rep.Devices[0].Result != fleet.InventoryStale || len(rep.Devices[0].Differences) != 0 {
		t.Errorf("MAC changed by the owner: %+v, %v", rep.Devices, err)
	}
}

type downInventory struct{ *fleettest.NetBox }

var errDown = errors.New("dial tcp netbox:443: connection refused")

func (downInventory) Devices(context.Context) ([]fleet.Device, error) { return nil, errDown }
func (downInventory) DeviceByName(context.Context, string) (fleet.Device, error) {
	return fleet.Device{}, errDown
}

// TestInventoryCannotCheck: NetBox down, its change log unreadable, an unknown device.
func TestInventoryCannotCheck(t *testing.T) {
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080"},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: downInventory{fleettest.NewNetBox()}, ChangeLog: &fleettest.ChangeLog{}, Installer: fleettest.NewInstaller(),
			Catalog: fleettest.Catalog(), Clock: fleettest.NewClock(testEpoch), Random: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Review.InventoryCheck(context.Background(), nil); !errors.Is(err, fleet.ErrNetBoxUnavailable) || errors.Is(err, fleet.ErrChangeLog) {
		t.Errorf("NetBox down: %v, want ErrNetBoxUnavailable, not ErrChangeLog", err)
	}
	s2, _ := inventoryService(t, &fleettest.ChangeLog{Err: errDown}, agreeing(1, "node-a"))
	if _, err := s2.Review.InventoryCheck(context.Background(), nil); !errors.Is(err, fleet.ErrNetBoxUnavailable) || !errors.Is(err, fleet.ErrChangeLog) || !strings.Contains(err.Error(), "change log") {
		t.Errorf("change log down: %v", err)
	}
	if _, err := s2.Review.InventoryCheck(context.Background(), []string{"nobody"}); err == nil || !strings.Contains(err.Error(), `no device named "nobody"`) {
		t.Errorf("unknown device: %v", err)
	}
}

// TestAfterSweep: Config.AfterSweep runs after each pass over the whole fleet, once the pass is
// done with its listing: a reconcile after its onListing, and an inventory check; never before.
func TestAfterSweep(t *testing.T) {
	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	seen := func(n int) []string {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := slices.Clone(events)
			mu.Unlock()
			if len(got) >= n || time.Now().After(end) {
				return got
			}
		}
	}
	clock, reg := fleettest.NewClock(testEpoch), prometheus.NewRegistry()
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd", AfterSweep: func() { note("after sweep") }},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(agreeing(1, "node-a"), agreeing(2, "node-b")), ChangeLog: &fleettest.ChangeLog{},
			Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock, Registry: reg,
			Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- s.Requests.Run(ctx, time.Hour, func(_ context.Context, ds []fleet.Device) {
			clock.Advance(3 * time.Second) // the listing's hooks are part of the pass
			note(fmt.Sprintf("listing of %d", len(ds)))
		})
	}()
	got := seen(2)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run ended by its context: %v, want nil", err)
	}
	if want := []string{"listing of 2", "after sweep"}; !slices.Equal(got, want) {
		t.Fatalf("reconcile pass: %q, want %q", got, want)
	}
	if n, sum := histogram(t, reg, "fleetd_reconcile_pass_seconds"); n != 1 || sum != 3 {
		t.Errorf("fleetd_reconcile_pass_seconds: %d passes, %g s in all; want the one pass, its listing's hook's 3 s included", n, sum)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- s.Review.RunInventoryCheck(ctx, time.Millisecond, time.Hour) }()
	got = seen(3)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunInventory ended by its context: %v, want nil", err)
	}
	if want := []string{"listing of 2", "after sweep", "after sweep"}; !slices.Equal(got, want) {
		t.Fatalf("after an inventory check: %q, want %q", got, want)
	}
}

// TestInventoryCertExpiring: a node's current certificate is a difference when less than a
// quarter of the time from its renewal point to its NotAfter is left (the rule of the
// FleetdCertExpiring alert): not just after the renewal point, not with exactly a quarter left,
// from a second less, and after NotAfter as lapsed.
func TestInventoryCertExpiring(t *testing.T) {
	iss, lak := issueLAK(t, fleettest.NewClock(testEpoch))
	notAfter, renew := lak.Leaf.NotAfter, iss.RenewalPoint(pki.ProfileLAK, lak.Leaf)
	quarter := notAfter.Sub(renew) / 4
	for _, r := range []struct {
		name   string
		now    time.Time
		detail string // the difference's sentence, or "" for none
	}{
		{"ok/just past the renewal point", renew.Add(time.Second), ""},
		{"ok/exactly a quarter of the renewal window left", notAfter.Add(-quarter), ""},
		{"refuse/a second less than a quarter left", notAfter.Add(-quarter + time.Second), "the LAK certificate lapses in " + (quarter - time.Second).String()},
		{"refuse/past NotAfter", notAfter.Add(time.Minute), "the LAK certificate lapsed at "},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := agreeing(1, "node-a")
			d.Owned.LAKSerial, d.Owned.Identity.LAK.Chain = lak.SerialHex(), lak.DER()
			d.Owned.LastBootCheck = r.now.Add(-10 * time.Minute)
			s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd"},
				fleet.Deps{Seal: fleettest.SealKeys(), NetBox: fleettest.NewNetBox(d), ChangeLog: &fleettest.ChangeLog{}, Installer: fleettest.NewInstaller(),
					Catalog: fleettest.Catalog(), Clock: fleettest.NewClock(r.now), Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)),
					Attest: fleet.Attestation{Issuer: iss}})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Review.InventoryCheck(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, diff := range rep.Devices[0].Differences {
				got = append(got, string(diff.Kind)+": "+diff.Detail)
			}
			switch {
			case r.detail == "" && len(got) != 0:
				t.Errorf("differences %q, want none", got)
			case r.detail != "" && (len(got) != 1 || !strings.Contains(got[0], string(fleet.DiffCertExpiring)+": "+r.detail)):
				t.Errorf("differences %q, want one %s saying %q", got, fleet.DiffCertExpiring, r.detail)
			}
		})
	}
}

// TestInventoryMACChanges: which saves of MAC addresses make a device's facts stale rather than
// different: one whose value before or after is a MAC the device declares or the machine
// reported; not another device's, nor a MAC created or deleted elsewhere while the facts name
// no MAC.
func TestInventoryMACChanges(t *testing.T) {
	const reported, declared = "3c:ec:ef:4c:4f:54", "02:aa:00:00:00:01"
	for _, r := range []struct {
		name          string
		claimed       string // the MAC the machine reported
		before, after string // the MAC address saved
		want          fleet.InventoryResult
	}{
		{"ok/the owner changed the reported MAC to the declared one", reported, reported, declared, fleet.InventoryStale},
		{"ok/the owner deleted the reported MAC", reported, reported, "", fleet.InventoryStale},
		{"ok/the owner gave the device a MAC another interface had", reported, "02:cc:00:00:00:01", declared, fleet.InventoryStale},
		{"refuse/another device's MAC changed: the difference stands", reported, "02:dd:00:00:00:01", "02:ee:00:00:00:01", fleet.InventoryDiffers},
		{"refuse/a MAC created elsewhere, no MAC reported", "", "", "02:ee:00:00:00:01", fleet.InventoryAgrees},
		{"refuse/a MAC deleted elsewhere, no MAC reported", "", "02:ee:00:00:00:01", "", fleet.InventoryAgrees},
	} {
		t.Run(r.name, func(t *testing.T) {
			m := agreeing(2, "node-b")
			m.MACs, m.Owned.Facts.Claimed.MAC = []fleet.MAC{declared}, r.claimed
			log := &fleettest.ChangeLog{MACs: []fleet.MACChange{{User: "owner", Time: testEpoch.Add(-5 * time.Minute), Before: r.before, After: r.after}}}
			s, _ := inventoryService(t, log, m)
			rep, err := s.Review.InventoryCheck(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.Devices[0]; got.Result != r.want {
				t.Errorf("%s, want %s: %+v", got.Result, r.want, got)
			}
		})
	}
}

// TestInventoryNoDisksReported: a machine whose agent reported no disks (disks_found 0) says
// nothing of its disk_serial: no difference.
func TestInventoryNoDisksReported(t *testing.T) {
	d := agreeing(1, "node-a")
	d.Owned.Facts.Claimed.Disks, d.Owned.Facts.Claimed.DisksFound = nil, 0
	s, _ := inventoryService(t, &fleettest.ChangeLog{}, d)
	rep, err := s.Review.InventoryCheck(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Devices[0]; got.Result != fleet.InventoryAgrees || len(got.Differences) != 0 {
		t.Errorf("%+v, want agrees", got)
	}
}

// lockedLog is a zerolog destination safe for a loop's goroutine to write while the test reads.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestRunInventoryCheckLogs: the hourly loop logs one line per check: what it checked when the
// check ran, a warning naming the failure when it did not (the next one tries again).
func TestRunInventoryCheckLogs(t *testing.T) {
	for _, r := range []struct {
		name          string
		netbox        fleet.NetBox
		want, notWant string
	}{
		{"ok/a check", fleettest.NewNetBox(agreeing(1, "node-a")), `"level":"info","devices":1,"differs":false,"message":"inventory checked"`, "failed"},
		{"refuse/NetBox down", downInventory{fleettest.NewNetBox()}, `"level":"warn","error":"list devices`, "inventory checked"},
	} {
		t.Run(r.name, func(t *testing.T) {
			log, swept := &lockedLog{}, make(chan struct{}, 1)
			s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ServiceUser: "fleetd", AfterSweep: func() { swept <- struct{}{} }},
				fleet.Deps{Seal: fleettest.SealKeys(), NetBox: r.netbox, ChangeLog: &fleettest.ChangeLog{}, Installer: fleettest.NewInstaller(),
					Catalog: fleettest.Catalog(), Clock: fleettest.NewClock(testEpoch), Random: rand.New(rand.NewSource(1)), Logger: zerolog.New(log)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- s.Review.RunInventoryCheck(ctx, time.Millisecond, time.Hour) }()
			<-swept // the first check is over
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("the inventory check ended with %v, want nil when its context ends", err)
			}
			if got := log.String(); !strings.Contains(got, r.want) || strings.Contains(got, r.notWant) || strings.Count(got, "\n") != 1 {
				t.Errorf("logged %q, want one line with %q and without %q", got, r.want, r.notWant)
			}
		})
	}
}

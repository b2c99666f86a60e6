package fleet_test

import (
	"context"
	"errors"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// watchedNetBox is the in-memory NetBox that calls onRead after each read of one device ("device")
// and of its change log ("history"), before the service gets the answer: a test looks at the
// service at that moment, or holds the read there.
type watchedNetBox struct {
	*fleettest.NetBox
	onRead func(kind string, id int64)
}

func (w *watchedNetBox) Device(ctx context.Context, id int64) (fleet.Device, error) {
	d, err := w.NetBox.Device(ctx, id)
	w.onRead("device", id)
	return d, err
}

func (w *watchedNetBox) DeviceHistory(ctx context.Context, id int64, until func(fleet.DeviceChange) bool) ([]fleet.DeviceChange, error) {
	h, err := w.NetBox.DeviceHistory(ctx, id, until)
	w.onRead("history", id)
	return h, err
}

// newWatchedService is newAccessService on inv read through onRead.
func newWatchedService(t *testing.T, inv *fleettest.NetBox, onRead func(kind string, id int64)) testService {
	t.Helper()
	clock := fleettest.NewClock(testEpoch)
	inv.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: &watchedNetBox{NetBox: inv, onRead: onRead}, ChangeLog: inv,
			Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock, Renderer: sharedRenderer(),
			Random: rand.New(rand.NewSource(1)), Registry: nil})
	if err != nil {
		t.Fatal(err)
	}
	return testService{Service: s, clock: clock}
}

// listOnly fills the view from a listing and nothing else: the inventory check lists through the
// service's NetBox and decides and writes nothing.
func listOnly(t *testing.T, s testService) {
	t.Helper()
	if _, err := s.Review.InventoryCheck(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// wantDenied fails unless the webhook denies node n9 for code.
func wantDenied(t *testing.T, s testService, code, when string) {
	t.Helper()
	if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny || got.Refusal.Code != code {
		t.Fatalf("n9 %s: %+v, want denied %s", when, got, code)
	}
}

// TestNodeAccessReplayedGoodStanding: a device editor writes back an earlier copy of a refused
// device's fields — "active, boot check ok" under the seal fleetd wrote them with, which still
// verifies (a replay, docs/design.md §9 "Sealed fields"). A listing judges on seals only, so it
// must not let the node back in: the webhook denies it after a listing alone, at the moment the
// reconcile pass reads the device's change log, when that read fails, and after the pass, which
// puts fleetd's values back.
func TestNodeAccessReplayedGoodStanding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused func(*fleet.Device)
		code    string
	}{
		{"refuse/wiping", func(d *fleet.Device) {
			d.Owned.State, d.Owned.Request, d.Owned.Workflow = fleet.StateWiping, "wipe-cccccccc", "n9-wipe-cccccccc"
		}, fleet.NodeRefusedLeaving},
		{"refuse/retired", func(d *fleet.Device) {
			d.Status = fleet.StatusDecommissioning
			d.Owned = fleet.Owned{State: fleet.StateRetired, Request: "retire-cccccccc", Workflow: "n9-retire-cccccccc"}
		}, fleet.NodeRefusedLeaving},
		{"refuse/boot-check-failed", func(d *fleet.Device) {
			d.Owned.BootCheck, d.Owned.LastBootCheck = fleet.BootCheckFailed, testEpoch.Add(time.Hour)
		}, fleet.NodeRefusedBootFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			inv := fleettest.NewNetBox(node(9, "n9"), node(1, "n1"), node(2, "n2"))
			good := inv.Get(9) // the copy the editor keeps: sealed by fleetd, in good standing
			var (
				s          testService
				mu         sync.Mutex
				atLogReads []fleet.NodeDecision // the webhook's answer about n9 at each read of its change log
			)
			s = newWatchedService(t, inv, func(kind string, id int64) {
				if kind == "history" && id == 9 {
					d := s.NodeAccess.Decide(asNode("n9"))
					mu.Lock()
					atLogReads = append(atLogReads, d)
					mu.Unlock()
				}
			})
			inv.Set(with(inv.Get(9), tc.refused)) // fleetd's write
			listOnly(t, s)
			wantDenied(t, s, tc.code, "before the replay")

			saveCopy(inv, fleettest.Owner, good)
			listOnly(t, s)
			wantDenied(t, s, tc.code, "after a listing of the replayed copy")

			inv.HistoryErr = errors.New("503 Service Unavailable")
			if _, err := s.Requests.ReconcileAll(ctx); err == nil {
				t.Fatal("the pass succeeded without the change log")
			}
			wantDenied(t, s, tc.code, "after a pass that could not read the change log")

			inv.HistoryErr = nil
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			if got := s.NodeAccess.Decide(asNode("n9")); !got.Deny {
				t.Fatalf("n9 after the pass: %+v, want denied", got)
			}
			if got := inv.Get(9); got.Seal == good.Seal || got.Owned.BootCheck == fleet.BootCheckOK && got.Owned.State == fleet.StateActive {
				t.Errorf("n9 after the pass: %+v, want fleetd's values put back", got.Owned)
			}
			if j := inv.JournalOf(9); len(j) == 0 || !strings.Contains(j[0], "were written by "+fleettest.Owner) {
				t.Errorf("journal %q, want the restore of the owner's write", j)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(atLogReads) == 0 {
				t.Fatal("the passes never read n9's change log")
			}
			for i, d := range atLogReads {
				if !d.Deny {
					t.Errorf("n9 at the pass's read %d of its change log: %+v, want denied", i+1, d)
				}
			}
		})
	}
}

// TestNodeAccessLoosensOnAVouchedRead: another instance moves a refused device back into good
// standing with its own sealed write. This instance's listing alone does not let the node back in
// (a replay looks the same to it); its next reconcile pass reads the device with its change log,
// which shows fleetd's user wrote the values, and the node is in good standing after that one
// pass, at the cost of a read of that device's change log alone. A pass whose read of the change
// log fails leaves the node denied.
func TestNodeAccessLoosensOnAVouchedRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused fleet.Device
		code    string
		// other is the other instance's write that puts the device in good standing.
		other func(t *testing.T, inv *fleettest.NetBox)
	}{
		{name: "ok/the other instance claims a provision of an untrusted device",
			refused: with(node(9, "n9"), func(d *fleet.Device) { d.Owned = fleet.Owned{State: fleet.StateUntrusted} }),
			code:    fleet.NodeRefusedState,
			other: func(t *testing.T, inv *fleettest.NetBox) {
				b := newAccessService(t, inv, fleet.NodeAccessConfig{}, nil) // a second instance on the same NetBox
				inv.WriteAs(fleettest.Owner, 9, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionProvision })
				if _, err := b.Requests.Reconcile(context.Background(), 9); err != nil {
					t.Fatal(err)
				}
				if got := inv.Get(9).Owned; got.State != fleet.StatePending || !strings.HasPrefix(got.Request, "provision-") {
					t.Fatalf("the other instance did not claim the provision: %+v", got)
				}
			}},
		{name: "ok/the other instance's write of active after a wipe",
			refused: with(node(9, "n9"), func(d *fleet.Device) {
				d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-cccccccc", Workflow: "n9-wipe-cccccccc"}
			}),
			code: fleet.NodeRefusedLeaving,
			other: func(t *testing.T, inv *fleettest.NetBox) {
				inv.Set(node(9, "n9")) // sealed, saved as fleetd's user: active, nothing for the reconcile to do
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			inv := fleettest.NewNetBox(tc.refused, node(1, "n1"), node(2, "n2"))
			var (
				mu       sync.Mutex
				logReads = map[int64]int{}
			)
			s := newWatchedService(t, inv, func(kind string, id int64) {
				if kind == "history" {
					mu.Lock()
					logReads[id]++
					mu.Unlock()
				}
			})
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, s, tc.code, "before the other instance's write")

			tc.other(t, inv)
			listOnly(t, s)
			wantDenied(t, s, tc.code, "after a listing alone")

			inv.HistoryErr = errors.New("503 Service Unavailable")
			if _, err := s.Requests.ReconcileAll(ctx); err == nil {
				t.Fatal("the pass succeeded without the change log")
			}
			wantDenied(t, s, tc.code, "after a pass whose read of the change log failed")

			inv.HistoryErr = nil
			mu.Lock()
			clear(logReads)
			mu.Unlock()
			if _, err := s.Requests.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			if got := s.NodeAccess.Decide(asNode("n9")); got.Deny || got.Result != fleet.NodeNoOpinion {
				t.Fatalf("n9 after one pass: %+v, want no opinion", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if logReads[9] == 0 || logReads[1] != 0 || logReads[2] != 0 {
				t.Errorf("change log reads in the pass, by device: %v; want n9's only", logReads)
			}
		})
	}
}

// TestNodeAccessReadBeforeOwnWrite: a device read that began before this instance's own write of a
// refusal (here the claim of a wipe) found the device in good standing; an editor then writes the
// good copy back and a listing sees it. When that read ends, it does not lift the refusal: what it
// read is older than the claim.
func TestNodeAccessReadBeforeOwnWrite(t *testing.T) {
	ctx := context.Background()
	inv := fleettest.NewNetBox(node(9, "n9"), node(1, "n1"))
	good := inv.Get(9)
	var (
		mu      sync.Mutex
		held    = map[string]bool{} // the reads of n9 to hold, once each
		reached = make(chan string, 2)
		release = make(chan struct{})
	)
	s := newWatchedService(t, inv, func(kind string, id int64) {
		mu.Lock()
		hold := id == 9 && held[kind]
		held[kind] = false
		mu.Unlock()
		if hold {
			reached <- kind
			<-release
		}
	})
	if _, err := s.Requests.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	held["device"], held["history"] = true, true
	mu.Unlock()

	// The operator's view of n9: a read with its change log, held once both reads returned.
	viewed := make(chan error, 1)
	go func() {
		_, err := s.Views.View(ctx, "n9")
		viewed <- err
	}()
	<-reached
	<-reached

	inv.WriteAs(fleettest.Owner, 9, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
	if _, err := s.Requests.Reconcile(ctx, 9); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, s, fleet.NodeRefusedLeaving, "right after this instance claimed its wipe")
	saveCopy(inv, fleettest.Owner, good)
	listOnly(t, s)
	wantDenied(t, s, fleet.NodeRefusedLeaving, "after a listing of the replayed copy")

	close(release)
	if err := <-viewed; err != nil {
		t.Fatal(err)
	}
	wantDenied(t, s, fleet.NodeRefusedLeaving, "after the read begun before the claim ended")
}

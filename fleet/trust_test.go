package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// activeNode is an active provision's owned values: what a wiped machine's copy would bring back.
func activeNode() fleet.Device {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusActive
	d.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-aaaaaaaa", Workflow: "node-a-provision-aaaaaaaa",
		LDevIDSerial: "0a01", LAKSerial: "0b01", Message: "Delivered."}
	return attested(d)
}

// wipedNode is the same device after its wipe: the identity and the serials cleared.
func wipedNode() fleet.Device {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusOffline
	d.Owned = fleet.Owned{State: fleet.StateWiped, Request: "wipe-bbbbbbbb", Workflow: "node-a-wipe-bbbbbbbb", Message: "Workflow succeeded: disk wiped."}
	return d
}

// TestTrust: the verdict on a device's owned values as a decision reads them (the device and its
// change log at once): trusted only when the seal verifies and fleetd saved them last (or no save
// within the log touched them); anything else is never acted on — its values are held apart
// (Trust.Read) and Owned is zero — and fleetd's newest own write in the log, its seal verified, is
// what a repair would put back.
func TestTrust(t *testing.T) {
	other, _ := fleet.NewSealKeys(fleet.SealKey{ID: "k9", Secret: []byte(strings.Repeat("9", 32))})
	rows := []struct {
		name        string
		setup       func(inv *fleettest.NetBox)
		want        fleet.Verdict
		wantRestore fleet.State // "" = no restore source
		wantWriter  string      // "" = none named
		wantReason  string
	}{
		{name: "ok/sealed, and fleetd saved it last", setup: func(inv *fleettest.NetBox) { inv.Set(wipedNode()) },
			want: fleet.VerdictTrusted, wantReason: "sealed by fleetd, which wrote them last"},
		{name: "ok/sealed, and no save within the change log touched it", setup: func(inv *fleettest.NetBox) {},
			want: fleet.VerdictTrusted, wantReason: "no save within NetBox's change log touched them"},
		{name: "ok/the owner's own fields saved since", setup: func(inv *fleettest.NetBox) {
			inv.Set(wipedNode())
			inv.WriteAs("admin", 12, func(d *fleet.Device) {
				d.Declared.DesiredAction, d.Declared.DiskSerial = fleet.ActionProvision, "S-NEW"
			})
		}, want: fleet.VerdictTrusted},
		{name: "ok/unsealed values fleetd saved last (before the upgrade)", setup: func(inv *fleettest.NetBox) {
			inv.WriteAs(fleettest.ServiceUser, 12, func(d *fleet.Device) { d.Seal = "" })
		}, want: fleet.VerdictUnsealed, wantReason: "fleetd wrote them last"},
		{name: "ok/unsealed values older than the change log", setup: func(inv *fleettest.NetBox) {
			inv.WriteAs(fleettest.ServiceUser, 12, func(d *fleet.Device) { d.Seal = "" })
			inv.TrimHistory(testEpoch.Add(time.Hour))
		}, want: fleet.VerdictUnsealed, wantReason: "no save within NetBox's change log touched them"},
		{name: "refuse/unsealed values another user saved last (forged before the upgrade)", setup: func(inv *fleettest.NetBox) {
			inv.WriteAs(fleettest.ServiceUser, 12, func(d *fleet.Device) { d.Seal = "" })
			inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned.LAKSerial = "0bad" })
		}, want: fleet.VerdictUntrusted, wantWriter: "admin"},
		{name: "refuse/a value changed under fleetd's seal", setup: func(inv *fleettest.NetBox) {
			inv.Set(activeNode())
			inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned.LAKSerial = "0bad" })
		}, want: fleet.VerdictUntrusted, wantRestore: fleet.StateActive, wantWriter: "admin", wantReason: "written by admin"},
		{name: "refuse/a seal fleetd once wrote, copied back with its values (a replay)", setup: func(inv *fleettest.NetBox) {
			inv.Set(activeNode())
			old := inv.Get(12)
			inv.Set(wipedNode())
			saveCopy(inv, "admin", old)
		}, want: fleet.VerdictUntrusted, wantRestore: fleet.StateWiped, wantWriter: "admin"},
		{name: "refuse/fleetd's current values saved back by another user (the second of two saves)", setup: func(inv *fleettest.NetBox) {
			inv.Set(activeNode())
			old := inv.Get(12)
			inv.Set(wipedNode())
			cur := inv.Get(12)
			saveCopy(inv, "admin", old)
			saveCopy(inv, "admin", cur)
		}, want: fleet.VerdictUntrusted, wantRestore: fleet.StateWiped, wantWriter: "admin"},
		{name: "refuse/another device's seal and values", setup: func(inv *fleettest.NetBox) {
			o := inv.Get(13)
			inv.WriteAs("admin", 12, func(d *fleet.Device) { d.Owned, d.Seal = o.Owned, o.Seal })
		}, want: fleet.VerdictUntrusted, wantWriter: "admin", wantReason: "fleet_seal is not fleetd's seal of these values"},
		{name: "refuse/a key this fleetd does not have", setup: func(inv *fleettest.NetBox) {
			inv.WriteAs(fleettest.ServiceUser, 12, func(d *fleet.Device) { d.Seal = other.Seal(12, d.Owned, testEpoch) })
		}, want: fleet.VerdictUnknownKey, wantReason: "names key k9, which this fleetd is not configured with"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			node13 := activeNode()
			node13.ID, node13.Name = 13, "node-b"
			inv := fleettest.NewNetBox(activeNode(), node13)
			s := newTestService(inv, fleettest.NewInstaller())
			r.setup(inv)
			d, err := s.ReadDevice(context.Background(), 12)
			if err != nil {
				t.Fatal(err)
			}
			tr := d.Trust
			if tr.Verdict != r.want || !tr.Logged || !strings.Contains(tr.Reason, r.wantReason) || tr.Writer != r.wantWriter {
				t.Errorf("trust %+v, want %s (%q) written by %q", tr, r.want, r.wantReason, r.wantWriter)
			}
			if !tr.Trusted() && (!ownedIsEmpty(d.Owned) || tr.Read.State == "") {
				t.Errorf("untrusted: Owned %+v (want zero), Read %+v (want the values as NetBox holds them)", d.Owned, tr.Read)
			}
			switch {
			case r.wantRestore == "" && tr.Restore != nil:
				t.Errorf("restore source %+v, want none", tr.Restore)
			case r.wantRestore != "" && (tr.Restore == nil || tr.Restore.Owned.State != r.wantRestore):
				t.Errorf("restore source %+v, want fleetd's write with fleet_state %s", tr.Restore, r.wantRestore)
			}
		})
	}
	t.Run("error/the change log cannot be read: no verdict, no decision", func(t *testing.T) {
		inv := fleettest.NewNetBox(activeNode())
		s := newTestService(inv, fleettest.NewInstaller())
		inv.HistoryErr = errors.New("NetBox answered 503")
		if d, err := s.ReadDevice(context.Background(), 12); err == nil || !strings.Contains(err.Error(), "read the change log of device 12") {
			t.Errorf("read = %+v, %v; want the change log's error", d.Trust, err)
		}
	})
}

func ownedIsEmpty(o fleet.Owned) bool {
	return o.State == "" && o.Request == "" && o.LAKSerial == "" && o.Identity.Empty()
}

// staleHistory is an inventory whose first change-log read ran before the device's last saves
// (the two reads run at once: the log's can be answered first).
type staleHistory struct {
	*fleettest.NetBox
	drop  int // the newest saves the first read misses
	reads atomic.Int32
}

func (s *staleHistory) DeviceHistory(ctx context.Context, id int64, until func(fleet.DeviceChange) bool) ([]fleet.DeviceChange, error) {
	if s.reads.Add(1) > 1 {
		return s.NetBox.DeviceHistory(ctx, id, until)
	}
	all := s.NetBox.Changes(id)
	all = all[:len(all)-s.drop]
	var out []fleet.DeviceChange
	for i := len(all) - 1; i >= 0; i-- {
		if out = append(out, all[i]); until(all[i]) {
			break
		}
	}
	return out, nil
}

// TestTrustReadsTheLogAgain: the change log is read beside the device, so it can miss the saves
// the device read shows. fleetd writes E1, then E2; another user copies E1 back (E3). A log read
// that ran before E2 and E3 shows fleetd's E1 last, with the seal the device holds again — the
// replay would pass. Its newest entry is older than the device's last_updated, so the log is read
// again after the device, and the replay is seen. A log read that saw the device's last save is
// not repeated.
func TestTrustReadsTheLogAgain(t *testing.T) {
	inv := fleettest.NewNetBox(activeNode())
	inv.Clock = fleettest.NewClock(testEpoch)
	inv.Set(activeNode())
	e1 := inv.Get(12)
	inv.Set(wipedNode())
	saveCopy(inv, "admin", e1)
	stale := &staleHistory{NetBox: inv, drop: 2}
	s := newTestService(stale, fleettest.NewInstaller())
	d, err := s.ReadDevice(context.Background(), 12)
	if err != nil {
		t.Fatal(err)
	}
	if d.Trust.Verdict != fleet.VerdictUntrusted || d.Trust.Writer != "admin" || stale.reads.Load() != 2 {
		t.Errorf("after a log read that missed the last saves: %s by %q with %d log reads, want untrusted by admin after a second read",
			d.Trust.Verdict, d.Trust.Writer, stale.reads.Load())
	}
	fresh := &staleHistory{NetBox: inv}
	s = newTestService(fresh, fleettest.NewInstaller())
	if _, err := s.ReadDevice(context.Background(), 12); err != nil || fresh.reads.Load() != 1 {
		t.Errorf("a log read that saw the last save: %v, %d reads, want one", err, fresh.reads.Load())
	}
}

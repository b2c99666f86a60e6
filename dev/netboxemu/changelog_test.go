package netboxemu

import (
	"fmt"
	"net/http"
	"testing"
)

// TestChangeLog: every save through the API that changes the object is recorded with its user
// and the snapshots before and after, in order; a save that changes nothing (as NetBox: equal
// snapshots), a refused write and seeding record nothing.
func TestChangeLog(t *testing.T) {
	f := newFixture(t)
	if got := f.emu.Changes("dcim.device", f.dev); len(got) != 0 {
		t.Fatalf("seeding recorded %d changes, want none", len(got))
	}
	steps := []struct {
		auth, body string
		status     int
	}{
		{bearer(f.admin), `{"custom_fields": {"desired_action": "provision"}}`, http.StatusOK},
		{bearer(f.fleetd), `{"custom_fields": {"desired_action": null, "fleet_state": "pending"}, "status": "staged"}`, http.StatusOK},
		{bearer(f.fleetd), `{"custom_fields": {"fleet_state": "pending"}}`, http.StatusOK}, // a no-op save
		{bearer(f.fleetd), `{"custom_fields": {"fleet_state": "no-such-state"}}`, http.StatusBadRequest},
	}
	for i, s := range steps {
		if status, _, got := f.patchDevice(t, s.auth, s.body); status != s.status {
			t.Fatalf("step %d: PATCH %s = %d %v, want %d", i, s.body, status, got, s.status)
		}
	}
	got := f.emu.Changes("dcim.device", f.dev)
	if len(got) != 2 {
		t.Fatalf("recorded %d changes, want 2 (the no-op save and the refused PATCH record nothing): %+v", len(got), got)
	}
	cf := func(snap map[string]any, k string) string {
		return fmt.Sprint(snap["custom_fields"].(map[string]any)[k])
	}
	want := []struct{ user, preAction, postAction, postState, postStatus string }{
		{"admin", "<nil>", "provision", "<nil>", "planned"},
		{"fleetd", "provision", "<nil>", "pending", "staged"},
	}
	for i, w := range want {
		c := got[i]
		if c.User != w.user || c.Action != "update" || c.ObjectID != f.dev || c.Seq <= 0 || (i > 0 && c.Seq <= got[i-1].Seq) ||
			cf(c.PreChange, "desired_action") != w.preAction || cf(c.PostChange, "desired_action") != w.postAction ||
			cf(c.PostChange, "fleet_state") != w.postState || c.PostChange["status"] != w.postStatus {
			t.Errorf("change %d = %s %s seq %d desired_action %s→%s fleet_state %s status %v; want %+v", i, c.User, c.Action, c.Seq,
				cf(c.PreChange, "desired_action"), cf(c.PostChange, "desired_action"), cf(c.PostChange, "fleet_state"), c.PostChange["status"], w)
		}
	}
	if other := f.emu.Changes("dcim.device", f.dev+1000); len(other) != 0 {
		t.Errorf("another device has %d changes, want none", len(other))
	}
}

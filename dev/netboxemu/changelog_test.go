package netboxemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
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

// TestChangeLogOneObject: a list of one object's changes (changed_object_id, as fleetd reads a
// device's history) is answered from the index of each object's changes exactly as a scan of
// the whole log answers it (the filter given twice: several values are not read from the index),
// with other objects' saves in between and after a rolled-back bulk write truncated the log.
func TestChangeLogOneObject(t *testing.T) {
	f := newFixture(t)
	seedClientInventory(t, f)
	admin := "Token " + f.admin
	patch := func(id int, body string) {
		t.Helper()
		if status, _, b := f.do(t, "PATCH", fmt.Sprintf("/api/dcim/devices/%d/", id), admin, body); status != http.StatusOK {
			t.Fatalf("PATCH device %d = %d %s", id, status, b)
		}
	}
	for i := range 3 {
		patch(1, fmt.Sprintf(`{"description": "one-%d"}`, i))
		patch(2, fmt.Sprintf(`{"description": "two-%d"}`, i))
	}
	// Refused as a whole: node1's save is undone and its change record dropped.
	if status, _, b := f.do(t, "PATCH", "/api/dcim/devices/", admin, `[{"id": 1, "description": "undone"}, {"id": 2, "status": "retired"}]`); status != http.StatusBadRequest {
		t.Fatalf("bulk PATCH = %d %s, want 400", status, b)
	}
	patch(2, `{"description": "two-last"}`)
	patch(1, `{"description": "one-last"}`)
	f.idle(t)
	list := func(query string) []string {
		t.Helper()
		status, _, b := f.do(t, "GET", "/api/core/object-changes/?"+query, admin, "")
		var page struct {
			Count   int `json:"count"`
			Results []struct {
				ID       int            `json:"id"`
				ObjectID int            `json:"changed_object_id"`
				Post     map[string]any `json:"postchange_data"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &page); status != http.StatusOK || err != nil || page.Count != len(page.Results) {
			t.Fatalf("GET %s = %d %s (%v)", query, status, b, err)
		}
		var out []string
		for _, r := range page.Results {
			out = append(out, fmt.Sprintf("%d:%d:%v", r.ID, r.ObjectID, r.Post["description"]))
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"changed_object_id=1", 4},
		{"changed_object_id=2", 4},
		{"changed_object_id=1&changed_object_type=dcim.device&ordering=time", 4},
		{"changed_object_id=2&action=update&user_name__n=admin", 0},
		{"changed_object_id=99", 0},
	} {
		narrowed := list(tc.query)
		if len(narrowed) != tc.want {
			t.Errorf("%s: %d changes %v, want %d", tc.query, len(narrowed), narrowed, tc.want)
		}
		id := strings.SplitN(strings.SplitN(tc.query, "&", 2)[0], "=", 2)[1]
		scanned := list(tc.query + "&changed_object_id=" + id)
		if strings.Join(narrowed, " ") != strings.Join(scanned, " ") {
			t.Errorf("%s: from the index %v, from a scan %v", tc.query, narrowed, scanned)
		}
	}
	// The index against the log itself: Changes walks every record, oldest first.
	for _, id := range []int{1, 2} {
		var want []string
		for _, c := range f.emu.Changes("dcim.device", int64(id)) {
			want = append(want, fmt.Sprintf("%d:%d:%v", c.Seq, id, c.PostChange["description"]))
		}
		if got := list(fmt.Sprintf("changed_object_id=%d&ordering=time", id)); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("device %d's changes oldest first from the index = %v, the log has %v", id, got, want)
		}
	}
	if got := list("changed_object_id=1&ordering=time"); len(got) != 4 || !strings.HasSuffix(got[3], ":1:one-last") {
		t.Errorf("node1's changes oldest first = %v, want its last save last and the undone one absent", got)
	}
}

// TestPruneChangelog: NetBox's housekeeping deletes the change records older than
// CHANGELOG_RETENTION (NB@v4.6.8:netbox/core/jobs.py prune_changelog); the records left keep
// their ids and are listed as before, a pruned record is gone from the API, and the next save
// takes the next id. A retention of 0 keeps everything.
func TestPruneChangelog(t *testing.T) {
	f := newFixture(t)
	auth := bearer(f.admin)
	save := func(desc string) {
		t.Helper()
		if status, _, b := f.patchDevice(t, auth, fmt.Sprintf(`{"description": %q}`, desc)); status != http.StatusOK {
			t.Fatalf("PATCH = %d %v", status, b)
		}
	}
	save("old")
	f.clock.advance(48*time.Hour, false)
	save("recent")
	if n := f.emu.PruneChangelog(0); n != 0 {
		t.Errorf("PruneChangelog(0) deleted %d records, want none (0 keeps the log)", n)
	}
	if n := f.emu.PruneChangelog(24 * time.Hour); n != 1 {
		t.Fatalf("PruneChangelog(24h) deleted %d records, want the one older than a day", n)
	}
	got := f.emu.Changes("dcim.device", f.dev)
	if len(got) != 1 || got[0].Seq != 2 || got[0].PostChange["description"] != "recent" {
		t.Fatalf("after the prune: %+v, want only the recent save, id 2", got)
	}
	if status, _, _ := f.do(t, "GET", "/api/core/object-changes/1/", auth, ""); status != http.StatusNotFound {
		t.Errorf("GET the pruned record = %d, want 404", status)
	}
	status, _, b := f.do(t, "GET", fmt.Sprintf("/api/core/object-changes/?changed_object_id=%d", f.dev), auth, "")
	if status != http.StatusOK || !strings.Contains(string(b), `"count": 1`) && !strings.Contains(string(b), `"count":1`) {
		t.Errorf("the device's changes after the prune = %d %s, want one", status, b)
	}
	save("next")
	if got := f.emu.Changes("dcim.device", f.dev); len(got) != 2 || got[1].Seq != 3 {
		t.Errorf("the save after the prune: %+v, want id 3", got)
	}
}

// TestChangeRecordedAfterTheSave: a change record's time is never before the last_updated its save
// gave the object, even when the clock does not move between saves (NetBox records the change in
// a post_save handler, after the save set last_updated): fleetd compares the two to know whether
// a change-log read saw a device's last save.
func TestChangeRecordedAfterTheSave(t *testing.T) {
	f := newFixture(t)
	f.clock.advance(0, true)
	for _, desc := range []string{"a", "b", "c"} {
		status, _, dev := f.patchDevice(t, bearer(f.admin), fmt.Sprintf(`{"description": %q}`, desc))
		if status != http.StatusOK {
			t.Fatalf("PATCH = %d", status)
		}
		updated, err := time.Parse(time.RFC3339Nano, dev["last_updated"].(string))
		if err != nil {
			t.Fatal(err)
		}
		got := f.emu.Changes("dcim.device", f.dev)
		if last := got[len(got)-1]; last.Time.Before(updated) {
			t.Errorf("save %s: recorded at %s, before the device's last_updated %s", desc, last.Time, updated)
		}
	}
}

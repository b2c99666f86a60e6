package netboxemu

import (
	"fmt"
	"maps"
	"net/http"
	"testing"
)

// TestRequestCounts: every API request is counted once under the route that answered it, ids as
// {id}, a refused one too; counts only grow, so two snapshots' difference is the work between.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	before := f.emu.RequestCounts()
	for range 2 {
		if code, _, _ := f.do(t, "GET", "/api/dcim/devices/?limit=10", bearer(f.fleetd), ""); code != http.StatusOK {
			t.Fatalf("list devices: %d", code)
		}
	}
	if code, _, _ := f.do(t, "GET", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), bearer(f.fleetd), ""); code != http.StatusOK {
		t.Fatalf("read device: %d", code)
	}
	if code, _, _ := f.do(t, "GET", "/api/dcim/interfaces/", "Bearer nbt_nope.nope", ""); code != http.StatusForbidden {
		t.Fatalf("a bad token: %d, want 403", code)
	}
	after := f.emu.RequestCounts()
	got := map[string]int64{}
	for route, n := range after {
		if d := n - before[route]; d != 0 {
			got[route] = d
		}
	}
	want := map[string]int64{"GET /api/dcim/devices/": 2, "GET /api/dcim/devices/{id}/": 1, "GET /api/dcim/interfaces/": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("requests counted %v, want %v", got, want)
	}
}

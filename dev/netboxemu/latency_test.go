package netboxemu

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestLatencyIsSpentOutsideTheLock: two requests are in their latency at the same time. Were
// the latency spent under the emulator's lock, the second could not start its wait until the
// first had answered, and the emulator would answer one request per latency at most.
func TestLatencyIsSpentOutsideTheLock(t *testing.T) {
	f := newFixture(t)
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	f.emu.cfg.Latency = 25 * time.Millisecond
	var waited []time.Duration
	f.emu.sleep = func(ctx context.Context, d time.Duration) bool {
		waited = append(waited, d) // under no lock: appended before entered is sent, read after both
		entered <- struct{}{}
		select {
		case <-release:
			return true
		case <-ctx.Done():
			return false
		}
	}
	done := make(chan int, 2)
	for range 2 {
		go func() {
			status, _, _ := f.do(t, "GET", fmt.Sprintf("/api/dcim/devices/%d/", f.dev), bearer(f.fleetd), "")
			done <- status
		}()
	}
	for i := range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 2 concurrent requests reached their latency: the latency is spent under the lock", i)
		}
	}
	// While both wait, the lock is free: seeding (which takes it) goes through.
	if _, err := f.emu.AddToken(TokenSpec{User: "latecomer"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	for range 2 {
		if status := <-done; status != http.StatusOK {
			t.Errorf("GET after the latency = %d, want 200", status)
		}
	}
	if len(waited) != 2 || waited[0] != 25*time.Millisecond || waited[1] != 25*time.Millisecond {
		t.Errorf("waits = %v, want two of Config.Latency (25ms)", waited)
	}
}

// TestLatencyScalesWithThePage: with LatencyObjects a list's page costs Latency × n/LatencyObjects
// in all (the part beyond Latency after the page is rendered, outside the lock), a page of up to
// LatencyObjects and a read of one object cost Latency, and without LatencyObjects every request
// costs Latency whatever its page.
func TestLatencyScalesWithThePage(t *testing.T) {
	f := newFixture(t)
	for i := range 119 { // the fixture's device and 119 more
		if _, err := f.emu.AddDevice(DeviceSpec{Name: fmt.Sprintf("paged-%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	f.emu.cfg.Latency = 10 * time.Millisecond
	var waited []time.Duration
	f.emu.sleep = func(_ context.Context, d time.Duration) bool {
		waited = append(waited, d) // requests made one after the other
		return true
	}
	for _, tc := range []struct {
		name    string
		objects int
		path    string
		want    []time.Duration
	}{
		{"ok/page-of-120", 50, "/api/dcim/devices/?limit=1000", []time.Duration{10 * time.Millisecond, 14 * time.Millisecond}},
		{"ok/page-of-50", 50, "/api/dcim/devices/?limit=50", []time.Duration{10 * time.Millisecond}},
		{"ok/page-of-1", 50, "/api/dcim/devices/?limit=1", []time.Duration{10 * time.Millisecond}},
		{"ok/one-device", 50, fmt.Sprintf("/api/dcim/devices/%d/", f.dev), []time.Duration{10 * time.Millisecond}},
		{"ok/unscaled", 0, "/api/dcim/devices/?limit=1000", []time.Duration{10 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.emu.cfg.LatencyObjects, waited = tc.objects, nil
			if status, body, _ := f.do(t, "GET", tc.path, bearer(f.fleetd), ""); status != http.StatusOK {
				t.Fatalf("GET %s = %d %s", tc.path, status, body)
			}
			if !slices.Equal(waited, tc.want) {
				t.Errorf("GET %s waited %v, want %v", tc.path, waited, tc.want)
			}
		})
	}
}

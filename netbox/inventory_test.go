package netbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/folly-infra/fleetd/netbox/layout"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// countingTransport counts the HTTP attempts the adapter makes (below its retries).
type countingTransport struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

type env struct {
	emu      *netboxemu.Emulator
	client   *netbox.Client
	attempts *countingTransport
	reg      *prometheus.Registry
	admin    string
	node1    int64
}

func newEnv(t testing.TB, extra int) *env {
	t.Helper()
	return newEnvAt(t, extra, nil)
}

// newEnvAt is newEnv with the emulator's clock (nil: the wall clock).
func newEnvAt(t testing.TB, extra int, clock func() time.Time) *env {
	t.Helper()
	emu, err := netboxemu.Start(netboxemu.Config{Rand: rand.New(rand.NewSource(1)), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	raw, err := os.ReadFile("../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.LoadSchema(raw, "http://127.0.0.1:1", "secret"); err != nil {
		t.Fatal(err)
	}
	e := &env{emu: emu, reg: prometheus.NewRegistry(), attempts: &countingTransport{next: http.DefaultTransport}}
	tok, _ := emu.AddToken(netboxemu.TokenSpec{User: "fleetd"})
	e.admin, _ = emu.AddToken(netboxemu.TokenSpec{User: "admin", Version: 1})
	e.node1, err = emu.AddDevice(netboxemu.DeviceSpec{Name: "node1", Serial: "SN-1", PrimaryIPv4: "10.0.0.21/24",
		Interfaces: []netboxemu.InterfaceSpec{
			{Name: "bmc", MgmtOnly: true, MACs: []string{"AA:BB:CC:00:00:99"}},
			{Name: "eth0", MACs: []string{"AA:BB:CC:00:00:02", "AA:BB:CC:00:00:01"}}},
		CustomFields: map[string]any{"fleet_class": "talos-cp", "disk_serial": "DISK1", "tpm": "2.0",
			"ek_sha256": " ABCD , ef01,,", "desired_action": "provision", "last_boot_check": "2026-05-01T10:00:00Z"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < extra; i++ {
		_, err := emu.AddDevice(netboxemu.DeviceSpec{Name: fmt.Sprintf("gen%04d", i), PrimaryIPv4: fmt.Sprintf("10.1.%d.%d/16", i/250, i%250+1),
			Interfaces:   []netboxemu.InterfaceSpec{{MACs: []string{fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256)}}},
			CustomFields: map[string]any{"fleet_class": "talos-worker", "disk_serial": fmt.Sprintf("D%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	e.client, err = netbox.New(netbox.Config{URL: emu.URL(), Token: tok, Retries: 2, RetryWaitMin: time.Millisecond,
		RetryWaitMax: 5 * time.Millisecond, HTTPClient: &http.Client{Transport: e.attempts}, Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestReadDevice(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	d, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	wantMACs := "aa:bb:cc:00:00:02,aa:bb:cc:00:00:01,aa:bb:cc:00:00:99"
	if got := joinMACs(d.MACs); got != wantMACs {
		t.Errorf("MACs = %s, want %s (primary interface's primary MAC first, management last)", got, wantMACs)
	}
	if d.Name != "node1" || d.Status != fleet.StatusPlanned || d.Serial != "SN-1" || d.Address.String() != "10.0.0.21/24" {
		t.Errorf("device = %+v", d)
	}
	if d.Declared.Class != "talos-cp" || d.Declared.TPM != fleet.TPM20 || d.Declared.DesiredAction != fleet.ActionProvision ||
		strings.Join(d.Declared.EKHashes, ",") != "abcd,ef01" {
		t.Errorf("declaration = %+v (ek_sha256 split and lowercased, not validated)", d.Declared)
	}
	if !d.Owned.LastBootCheck.Equal(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)) || !strings.HasPrefix(d.Version, `W/"`) {
		t.Errorf("owned %+v version %q", d.Owned, d.Version)
	}
	byName, err := e.client.DeviceByName(ctx, "node1")
	if err != nil || byName.ID != d.ID || byName.Version != d.Version {
		t.Errorf("DeviceByName = %+v, %v", byName, err)
	}
	if _, err := e.client.DeviceByName(ctx, "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("unknown name: err = %v, want ErrNotFound", err)
	}
	if _, err := e.client.Device(ctx, 999); !errors.Is(err, fleet.ErrNotFound) || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown id: err = %v, want ErrNotFound naming the 404", err)
	}
	if err := e.client.Ping(ctx); err != nil {
		t.Error(err)
	}
}

// TestReadDeviceAtOnce: a device read sends its two requests (the device, its interfaces with
// their MACs nested) at once, so a decision waits for one NetBox round trip, not two. The
// transport holds each request until both are in flight: sent one after the other, the first is
// held until the barrier gives up and the read fails. The interfaces are asked only for the
// fields fleetd reads, and no list of MAC addresses is read.
func TestReadDeviceAtOnce(t *testing.T) {
	e := newEnv(t, 0)
	var (
		mu      sync.Mutex
		paths   []string
		arrived = make(chan struct{})
	)
	barrier := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		paths = append(paths, r.URL.Path+"?"+r.URL.RawQuery)
		if len(paths) == 2 {
			close(arrived)
		}
		mu.Unlock()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			return nil, errors.New("the device read's requests were not in flight at once")
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	tok, _ := e.emu.AddToken(netboxemu.TokenSpec{User: "reader"})
	c, err := netbox.New(netbox.Config{URL: e.emu.URL(), Token: tok, Retries: -1, HTTPClient: &http.Client{Transport: barrier},
		Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Device(context.Background(), e.node1)
	if err != nil {
		t.Fatalf("read device: %v (requests: %v)", err, paths)
	}
	if got := joinMACs(d.MACs); got != "aa:bb:cc:00:00:02,aa:bb:cc:00:00:01,aa:bb:cc:00:00:99" {
		t.Errorf("MACs = %s, want the non-management interface's primary MAC, its other, then the management interface's", got)
	}
	slices.Sort(paths)
	want := []string{"/api/dcim/devices/1/?", "/api/dcim/interfaces/?device_id=1&fields=id%2Cdevice%2Cmgmt_only%2Cprimary_mac_address%2Cmac_addresses&limit=1000&offset=0"}
	if !slices.Equal(paths, want) {
		t.Errorf("requests = %q, want exactly %q", paths, want)
	}
}

func joinMACs(m []fleet.MAC) string {
	s := make([]string, len(m))
	for i, v := range m {
		s[i] = string(v)
	}
	return strings.Join(s, ",")
}

func TestListDevices(t *testing.T) {
	e := newEnv(t, 1000)
	before := e.attempts.n.Load()
	devs, err := e.client.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1001 {
		t.Fatalf("%d devices, want 1001", len(devs))
	}
	// Two pages of devices (1,001) and two of interfaces (1,002, their MACs nested): not one
	// request per device, and no list of MAC addresses.
	if n := e.attempts.n.Load() - before; n != 4 {
		t.Errorf("%d requests to list 1,001 devices, want 4", n)
	}
	for _, d := range devs {
		if len(d.MACs) == 0 || !d.Address.IsValid() || d.Version != "" {
			t.Fatalf("device %s: MACs %v address %v version %q", d.Name, d.MACs, d.Address, d.Version)
		}
	}
	if devs[0].Name != "gen0000" || devs[0].MACs[0] != "02:00:00:00:00:00" || devs[0].Declared.DiskSerial != "D0" || devs[1000].Name != "node1" {
		t.Errorf("devices[0] = %+v", devs[0])
	} // The listing asks for only the fields it reads (deviceFields): what it makes of a device is
	// what a read of that device makes of it (but the version a read carries for its write).
	one, err := e.client.Device(context.Background(), e.node1)
	if err != nil {
		t.Fatal(err)
	}
	one.Version = ""
	if !reflect.DeepEqual(devs[1000], one) {
		t.Errorf("node1 listed:\n%+v\nread:\n%+v", devs[1000], one)
	}
}

func TestUpdateMergesAndClears(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	d, _ := e.client.Device(ctx, e.node1)
	state, req := fleet.StatePending, "provision-abc"
	got, err := e.client.Update(ctx, e.node1, fleet.Patch{IfVersion: d.Version, ClearDesiredAction: true,
		Status: fleet.StatusStaged, State: &state, Request: &req})
	if err != nil {
		t.Fatal(err)
	}
	if got.Owned.State != fleet.StatePending || got.Owned.Request != req || got.Status != fleet.StatusStaged ||
		got.Declared.DesiredAction != fleet.ActionNone || got.Declared.Class != "talos-cp" || got.Version == d.Version {
		t.Errorf("after update: %+v", got)
	}
	empty := ""
	got, err = e.client.Update(ctx, e.node1, fleet.Patch{Request: &empty})
	if err != nil || got.Owned.Request != "" || got.Owned.State != fleet.StatePending {
		t.Errorf("clearing the request: %+v, %v", got.Owned, err)
	}
	cf, _ := e.emu.CustomFieldData(e.node1)
	if v, ok := cf["fleet_request"]; !ok || v != nil {
		t.Errorf("fleet_request stored as %v (present %v), want null", v, ok)
	}
	if _, ok := cf["fleet_message"]; ok {
		t.Error("Update wrote fleet_message, which the patch did not set")
	}
}

func TestUpdateConflict(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	d, _ := e.client.Device(ctx, e.node1)
	// The owner changes the device in between.
	req, _ := http.NewRequest("PATCH", fmt.Sprintf("%s/api/dcim/devices/%d/", e.emu.URL(), e.node1), strings.NewReader(`{"description": "moved"}`))
	req.Header.Set("Authorization", "Token "+e.admin)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("owner's PATCH: %v %v", resp, err)
	}
	state := fleet.StatePending
	before := e.attempts.n.Load()
	_, err := e.client.Update(ctx, e.node1, fleet.Patch{IfVersion: d.Version, State: &state})
	if !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "412") || !strings.Contains(err.Error(), "device 1") {
		t.Fatalf("err = %v, want ErrConflict naming the device and the 412", err)
	}
	if n := e.attempts.n.Load() - before; n != 1 {
		t.Errorf("%d attempts for a 412, want 1 (no retry)", n)
	}
	if cf, _ := e.emu.CustomFieldData(e.node1); cf["fleet_state"] != nil {
		t.Error("the conditional update was written")
	}
}

func TestRetries(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	e.emu.Faults().AddAPI(netboxemu.APIFaultRule{PathPrefix: "/api/dcim/devices/", Times: 2,
		Fault: netboxemu.APIFault{Status: http.StatusBadGateway}})
	before := e.attempts.n.Load()
	if _, err := e.client.Device(ctx, e.node1); err != nil {
		t.Fatalf("after two 502s: %v", err)
	}
	if n := e.attempts.n.Load() - before; n != 4 {
		t.Errorf("%d attempts, want 3 for the device and 1 for its interfaces", n)
	}
	e.emu.Faults().Clear()
	e.emu.Faults().AddAPI(netboxemu.APIFaultRule{PathPrefix: "/api/dcim/devices/", Fault: netboxemu.APIFault{Status: 503}})
	if _, err := e.client.Device(ctx, e.node1); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("persistent 503: err = %v", err)
	}
	tests := []struct {
		name   string
		status int
	}{{"refuse/400-not-retried", 400}, {"refuse/403-not-retried", 403}, {"refuse/412-not-retried", 412}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.emu.Faults().Clear()
			e.emu.Faults().AddAPI(netboxemu.APIFaultRule{PathPrefix: "/api/dcim/devices/", Fault: netboxemu.APIFault{Status: tt.status}})
			before := e.attempts.n.Load()
			_, err := e.client.Device(ctx, e.node1)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprint(tt.status)) {
				t.Errorf("err = %v", err)
			}
			if n := e.attempts.n.Load() - before; n != 2 {
				t.Errorf("%d attempts, want 2: the device once (not retried) and its interfaces once, sent alongside it", n)
			}
		})
	}
	bad, _ := netbox.New(netbox.Config{URL: e.emu.URL(), Token: "nbt_nope.nope", RetryWaitMin: time.Millisecond})
	if err := bad.Ping(ctx); err == nil || !strings.Contains(err.Error(), "Invalid v2 token") {
		t.Errorf("bad token: %v", err)
	}
}

func TestJournalAndMetrics(t *testing.T) {
	e := newEnv(t, 0)
	if err := e.client.Journal(context.Background(), e.node1, fleet.JournalWarning, "Rejected: disk_serial is empty."); err != nil {
		t.Fatal(err)
	}
	j := e.emu.Journal(e.node1)
	if len(j) != 1 || j[0].Kind != "warning" || j[0].CreatedBy != "fleetd" || j[0].Comments != "Rejected: disk_serial is empty." {
		t.Errorf("journal = %+v", j)
	}
	if err := e.client.Journal(context.Background(), 999, fleet.JournalInfo, "x"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("journal on a missing device: %v", err)
	}
	mfs, _ := e.reg.Gather()
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"fleetd_netbox_requests_total", "fleetd_netbox_request_errors_total", "fleetd_netbox_request_duration_seconds"} {
		if !names[n] {
			t.Errorf("metric %s not registered (have %v)", n, names)
		}
	}
}

// A newer NetBox: a status value go-netbox v4.3.0 does not know (FIELD_CHOICES) and a field it
// has never seen. go-netbox's strict model refused such an answer; the adapter decodes only the
// fields it reads, so the device, the list and the update's answer all read.
func TestFallbackOnNewerNetBox(t *testing.T) {
	e := newEnv(t, 0)
	upstream := e.emu.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		upstream.ServeHTTP(rec, r)
		body := rec.Body.String()
		if strings.HasPrefix(r.URL.Path, "/api/dcim/devices/") {
			body = strings.ReplaceAll(body, `"status":{"value":"planned","label":"Planned"}`, `"status":{"value":"burn-in","label":"Burn-in"}`)
			body = strings.Replace(body, `"id":`, `"new_in_47":{"x":1},"id":`, 1)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length") // the body changed
		w.WriteHeader(rec.Code)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	tok, _ := e.emu.AddToken(netboxemu.TokenSpec{User: "fleetd2"})
	c, _ := netbox.New(netbox.Config{URL: srv.URL, Token: tok})
	ctx := context.Background()
	d, err := c.Device(ctx, e.node1)
	if err != nil || d.Status != "burn-in" || d.Declared.Class != "talos-cp" || d.Version == "" || len(d.MACs) != 3 {
		t.Fatalf("Device via fallback = %+v, %v", d, err)
	}
	all, err := c.Devices(ctx)
	if err != nil || len(all) != 1 || all[0].Status != "burn-in" {
		t.Fatalf("Devices via fallback = %+v, %v", all, err)
	}
	st := fleet.StateActive
	if got, err := c.Update(ctx, e.node1, fleet.Patch{State: &st}); err != nil || got.Owned.State != st {
		t.Fatalf("Update via fallback = %+v, %v", got, err)
	}
}

// TestAnswerNotTheDevice: an answer that is not the device asked for (a proxy or a wrong NetBox
// URL answering 200 with something else) is refused naming both ids or the decoding, and a refused
// update's answer is not taken for the device.
func TestAnswerNotTheDevice(t *testing.T) {
	e := newEnv(t, 1)
	other := e.node1 + 1
	upstream := e.emu.Handler()
	var answer atomic.Value // "other": the other device's JSON; "html": a login page
	answer.Store("other")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == fmt.Sprintf("/api/dcim/devices/%d/", e.node1) {
			if answer.Load() == "html" {
				w.Header().Set("Content-Type", "text/html")
				_, _ = w.Write([]byte("<html><body>Sign in</body></html>"))
				return
			}
			r = r.Clone(r.Context())
			r.URL.Path = fmt.Sprintf("/api/dcim/devices/%d/", other)
		}
		upstream.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tok, _ := e.emu.AddToken(netboxemu.TokenSpec{User: "fleetd2"})
	c, _ := netbox.New(netbox.Config{URL: srv.URL, Token: tok})
	ctx := context.Background()
	want := fmt.Sprintf("read device %d: NetBox answered with device %d, not %d", e.node1, other, e.node1)
	if _, err := c.Device(ctx, e.node1); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Device = %v, want %q", err, want)
	}
	if _, err := c.DeviceFields(ctx, e.node1); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("DeviceFields = %v, want %q", err, want)
	}
	st := fleet.StateActive
	want = fmt.Sprintf("update device %d: NetBox answered with device %d, not %d", e.node1, other, e.node1)
	if _, err := c.Update(ctx, e.node1, fleet.Patch{State: &st}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Update = %v, want %q", err, want)
	}
	answer.Store("html")
	if _, err := c.Device(ctx, e.node1); err == nil || !strings.Contains(err.Error(), "decode NetBox's answer") {
		t.Errorf("Device answered with a login page = %v, want a decoding error", err)
	}
	d, err := e.client.Device(ctx, e.node1)
	if err != nil || d.Owned.State != "" {
		t.Errorf("device %d after the refusals = %+v, %v; want its state untouched", e.node1, d.Owned, err)
	}
}

// TestListAnswerRefused: a list page that is not NetBox's {count, next, previous, results} (an
// array, results that are not a list, an answer cut short, a login page) is refused with the
// decoding named, and no device is returned from it.
func TestListAnswerRefused(t *testing.T) {
	e := newEnv(t, 0)
	for _, tt := range []struct{ name, body string }{
		{"refuse/an array", `[]`},
		{"refuse/results not a list", `{"count":1,"next":null,"previous":null,"results":{"id":1}}`},
		{"refuse/cut short", `{"count":1,"next":null,"previous":null,"results":[{"id":1,"name":"node1"`},
		{"refuse/a login page", `<html><body>Sign in</body></html>`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/dcim/devices/" {
					_, _ = w.Write([]byte(tt.body))
					return
				}
				e.emu.Handler().ServeHTTP(w, r)
			}))
			defer srv.Close()
			tok, _ := e.emu.AddToken(netboxemu.TokenSpec{User: "fleetd-" + strings.ReplaceAll(tt.name, " ", "-")})
			c, _ := netbox.New(netbox.Config{URL: srv.URL, Token: tok})
			devs, err := c.Devices(context.Background())
			if err == nil || !strings.Contains(err.Error(), "list devices: decode NetBox's answer (200 OK)") || devs != nil {
				t.Errorf("Devices = %v, %v; want nothing and the decoding named", devs, err)
			}
		})
	}
}

// A list's count is NetBox's word, not a bound: sizing the result from a count of 10^15 or -5
// neither fails nor allocates for it, and the devices are the ones listed.
func TestListCountNotABound(t *testing.T) {
	e := newEnv(t, 3)
	want, err := e.client.Devices(context.Background())
	if err != nil || len(want) != 4 {
		t.Fatalf("Devices straight from the emulator = %d devices, %v", len(want), err)
	}
	countRE := regexp.MustCompile(`"count":\s*\d+`)
	for _, count := range []string{"1000000000000000", "-5", "0"} {
		t.Run("count "+count, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				e.emu.Handler().ServeHTTP(rec, r)
				body := rec.Body.Bytes()
				if r.URL.Path == "/api/dcim/devices/" {
					body = countRE.ReplaceAll(body, []byte(`"count":`+count))
				}
				w.WriteHeader(rec.Code)
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			tok, _ := e.emu.AddToken(netboxemu.TokenSpec{User: "fleetd-count" + count})
			c, _ := netbox.New(netbox.Config{URL: srv.URL, Token: tok})
			got, err := c.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if count == "1000000000000000" { // the next page is asked for, and is empty
				if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
					t.Errorf("devices (-straight +count %s):\n%s", count, diff)
				}
				return
			}
			if len(got) != len(want) { // a count at or under zero ends the list after its first page
				t.Errorf("%d devices, want the first page's %d", len(got), len(want))
			}
		})
	}
}

func BenchmarkDevices1000(b *testing.B) {
	e := newEnv(b, 999)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		devs, err := e.client.Devices(ctx)
		if err != nil || len(devs) != 1000 {
			b.Fatalf("%d devices, %v", len(devs), err)
		}
	}
}

// fleet_identity is a JSON custom field: written as an object, read back as the same material,
// and cleared to null.
func TestUpdateIdentity(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	issued := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	m := fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: "provision-abc", Issued: issued,
		Expires: issued.Add(4 * time.Hour), UUIDSHA256: fleet.UUIDHash("4C4C4544-0042"), SMBIOSSerial: "SN-1",
		LAK:    fleet.LAKMaterial{Chain: [][]byte{{0x30, 1}, {0x30, 2}}, Blob: []byte{1, 2, 3}},
		LDevID: fleet.LDevIDMaterial{Chain: [][]byte{{0x30, 3}}, Public: []byte{4}, Private: []byte{5}}}
	if _, err := e.client.Update(ctx, e.node1, fleet.Patch{Identity: &m}); err != nil {
		t.Fatal(err)
	}
	cf, _ := e.emu.CustomFieldData(e.node1)
	stored, ok := cf["fleet_identity"].(map[string]any)
	if !ok || stored["request"] != "provision-abc" || stored["uuid_sha256"] != fleet.UUIDHash("4c4c4544-0042") {
		t.Fatalf("fleet_identity stored as %#v, want a JSON object", cf["fleet_identity"])
	}
	got, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got.Owned.Identity); diff != "" {
		t.Errorf("identity read back (-wrote +read):\n%s", diff)
	}
	if !got.Owned.Identity.MatchesUUID(" 4c4c4544-0042") || got.Owned.Identity.MatchesUUID("4c4c4544-0043") {
		t.Error("MatchesUUID does not compare the normalised UUID's hash")
	}
	if _, err := e.client.Update(ctx, e.node1, fleet.Patch{Identity: &fleet.IdentityMaterial{}}); err != nil {
		t.Fatal(err)
	}
	if cf, _ := e.emu.CustomFieldData(e.node1); cf["fleet_identity"] != nil {
		t.Errorf("cleared fleet_identity stored as %#v, want null", cf["fleet_identity"])
	}
}

// TestPingWarnsOfOldNetBox: the readiness ping warns once, at NetBox's first answer, when NetBox
// is older than 4.6 (no ETag, If-Match ignored: one fleetd instance only), and never for 4.6 or
// later (4.10 included) or a version it cannot read.
func TestPingWarnsOfOldNetBox(t *testing.T) {
	for _, tc := range []struct {
		version string
		warn    bool
	}{
		{"4.5.3", true}, {"v4.2.9-Docker-3.2.0", true}, {"3.7.8", true},
		{"4.6.0", false}, {"4.6.8", false}, {"4.10.1", false}, {"5.0.0", false}, {"nightly", false}, {"", false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"netbox-version": %q, "python-version": "3.12.3"}`, tc.version)
		}))
		var logs bytes.Buffer
		c, err := netbox.New(netbox.Config{URL: srv.URL, Token: "t", Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := c.Ping(context.Background()); err != nil {
				t.Fatalf("%q: ping: %v", tc.version, err)
			}
		}
		srv.Close()
		n := strings.Count(logs.String(), "is older than 4.6")
		switch {
		case tc.warn && (n != 1 || !strings.Contains(logs.String(), "run exactly one fleetd instance")):
			t.Errorf("NetBox %q: want one warning naming one instance, logged %q", tc.version, logs.String())
		case !tc.warn && n != 0:
			t.Errorf("NetBox %q: want no warning, logged %q", tc.version, logs.String())
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fleet_facts is a JSON custom field: written as an object and read back as the same facts; a
// boot check's write without Patch.Facts (nothing changed) leaves it out of the change: NetBox's
// change log shows the same fleet_facts before and after that save, while last_boot_check moved.
func TestUpdateFacts(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	since := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	f := layout.Facts{Version: layout.FactsVersion,
		Proved: layout.ProvedFacts{EKSHA256: strings.Repeat("ab", 32), BootState: strings.Repeat("cd", 32), BootPolicy: "hookos",
			Learned: layout.Learned{Since: since, Source: layout.FactsFromEnrollment}},
		Claimed: layout.ClaimedFacts{SMBIOSUUIDSHA256: fleet.UUIDHash("4c4c4544-0042"), Disks: []layout.FactDisk{{Serial: "SER-A", Path: "/dev/disk/by-id/virtio-SER-A"}},
			DisksFound: 1, MAC: "52:54:00:12:34:56", Learned: layout.Learned{Since: since, Source: layout.FactsFromEnrollment}}}
	if _, err := e.client.Update(ctx, e.node1, fleet.Patch{Facts: &f}); err != nil {
		t.Fatal(err)
	}
	got, err := e.client.Device(ctx, e.node1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, got.Owned.Facts); diff != "" || got.Owned.FactsUnreadable != "" {
		t.Errorf("facts read back (-wrote +read):\n%s\nunreadable: %q", diff, got.Owned.FactsUnreadable)
	}
	checked, ok := since.Add(time.Hour), fleet.BootCheckOK
	if _, err := e.client.Update(ctx, e.node1, fleet.Patch{IfVersion: got.Version, LastBootCheck: &checked, BootCheck: &ok}); err != nil {
		t.Fatal(err)
	}
	changes := e.emu.Changes("dcim.device", e.node1)
	last := changes[len(changes)-1]
	cfOf := func(snap map[string]any) map[string]any { m, _ := snap["custom_fields"].(map[string]any); return m }
	pre, post := cfOf(last.PreChange), cfOf(last.PostChange)
	if pre == nil || post == nil || pre["last_boot_check"] == post["last_boot_check"] {
		t.Fatalf("the boot check's change: pre %v post %v, want last_boot_check moved", pre, post)
	}
	if !cmp.Equal(pre["fleet_facts"], post["fleet_facts"]) || post["fleet_facts"] == nil {
		t.Errorf("an unchanged boot check changed fleet_facts: pre %v, post %v", pre["fleet_facts"], post["fleet_facts"])
	}
	// A value fleetd cannot read is no facts, with the reason.
	for _, raw := range []any{map[string]any{"version": 9}, "a string", []any{1}} {
		got, err := netbox.FieldsOf(map[string]any{"fleet_facts": raw})
		if err != nil || !got.Owned.Facts.Empty() || !strings.Contains(got.Owned.FactsUnreadable, "fleet_facts") {
			t.Errorf("fleet_facts %v read as %+v, %q, %v; want no facts with the reason", raw, got.Owned.Facts, got.Owned.FactsUnreadable, err)
		}
	}
}

// TestConnectionsKept: the client keeps its connections to NetBox open between requests. Sixteen
// devices read at once (each with its interfaces beside it: up to 32 requests in flight)
// five times over open at most as many connections as were ever in flight; Go's default transport
// keeps two, so each round opened most of its connections again.
func TestConnectionsKept(t *testing.T) {
	emu, err := netboxemu.Start(netboxemu.Config{Rand: rand.New(rand.NewSource(1)), Latency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	id, err := emu.AddDevice(netboxemu.DeviceSpec{Name: "node1", Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{"AA:BB:CC:00:00:01"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(emu.Handler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tok, _ := emu.AddToken(netboxemu.TokenSpec{User: "fleetd"})
	c, err := netbox.New(netbox.Config{URL: srv.URL, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	const readers, rounds = 16, 5
	for range rounds {
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				if _, err := c.Device(context.Background(), id); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := opened.Load(); n > 2*readers {
		t.Errorf("%d connections opened for %d rounds of %d device reads (at most %d requests in flight); want them kept between rounds", n, rounds, readers, 2*readers)
	}
}

package netboxemu

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	nb "github.com/netbox-community/go-netbox/v4"
	"sigs.k8s.io/yaml"
)

const testSecret = "s3cret-shared-with-fleetd"

// fakeClock starts at a fixed instant and moves 1.5 ms on every reading (none when stuck).
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	stuck bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stuck {
		c.t = c.t.Add(1500 * time.Microsecond)
	}
	return c.t
}

// advance moves the clock forward by d; stuck stops it (every reading the same instant).
func (c *fakeClock) advance(d time.Duration, stuck bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t, c.stuck = c.t.Add(d), stuck
}

// receiver records the webhooks it is sent and answers status.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	status int
}

type received struct {
	path   string
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	rcv := &receiver{status: http.StatusAccepted}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.got = append(rcv.got, received{path: r.URL.Path, header: r.Header.Clone(), body: b})
		status := rcv.status
		rcv.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// fixture is a running emulator with the repo's schema, two users and a seeded device.
type fixture struct {
	emu    *Emulator
	rcv    *receiver
	cfs    int    // how many custom fields netbox-webhooks.yaml declares
	fleetd string // v2 token of the fleetd service user
	admin  string // v1 token of the owner
	dev    int64  // node1
	client *nb.APIClient
	clock  *fakeClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 5, 1, 17, 42, 11, 123456000, time.UTC)}
	emu, err := Start(Config{
		Clock:           clock.Now,
		Rand:            rand.New(rand.NewSource(1)),
		DeliveryTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	f := &fixture{emu: emu, rcv: newReceiver(t), clock: clock}
	raw, err := os.ReadFile("../../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.LoadSchema(raw, f.rcv.srv.URL, testSecret); err != nil {
		t.Fatal(err)
	}
	var declared struct {
		CustomFields []any `json:"custom_fields"`
	}
	if err := yaml.Unmarshal(raw, &declared); err != nil {
		t.Fatal(err)
	}
	f.cfs = len(declared.CustomFields)
	if f.fleetd, err = emu.AddToken(TokenSpec{User: "fleetd", Version: 2}); err != nil {
		t.Fatal(err)
	}
	if f.admin, err = emu.AddToken(TokenSpec{User: "admin", Version: 1}); err != nil {
		t.Fatal(err)
	}
	f.dev, err = emu.AddDevice(DeviceSpec{Name: "node1", Serial: "SN-1", PrimaryIPv4: "10.0.0.21/24",
		Interfaces: []InterfaceSpec{{Name: "eth0", MACs: []string{"aa:bb:cc:00:11:22", "aa:bb:cc:00:11:23"}},
			{Name: "bmc", MgmtOnly: true, MACs: []string{"AA-BB-CC-00-11-99"}}},
		CustomFields: map[string]any{"fleet_class": "talos-cp", "disk_serial": "DISK1", "tpm": "2.0"}})
	if err != nil {
		t.Fatal(err)
	}
	f.client = f.goNetbox(f.fleetd)
	return f
}

// goNetbox is the go-netbox v4.3.0 client fleetd uses, pointed at the emulator.
func (f *fixture) goNetbox(token string) *nb.APIClient {
	return nb.NewAPIClientFor(f.emu.URL(), token)
}

// do sends a raw API request and returns status, headers and body.
func (f *fixture) do(t *testing.T, method, path, auth string, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, f.emu.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (f *fixture) idle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.emu.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

func bearer(tok string) string { return "Bearer " + tok }

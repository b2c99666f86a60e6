package render_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// renderClock is a fixed clock for the renderer and the pending store.
type renderClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *renderClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *renderClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var renderEpoch = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// renderSecrets is one generated Talos secrets bundle shared by the tests of this package
// (generating one takes a while; the bundle is never modified).
var renderSecrets = sync.OnceValues(func() ([]byte, error) {
	return render.GenerateTalosSecrets(&renderClock{t: renderEpoch})
})

func newTestRenderer(tb testing.TB, mod func(*render.Config)) *render.Renderer {
	tb.Helper()
	sec, err := renderSecrets()
	if err != nil {
		tb.Fatalf("generate secrets: %v", err)
	}
	cfg := render.Config{
		TalosSecrets:    sec,
		TalosVersion:    "v1.11",
		ClusterName:     "folly",
		ClusterEndpoint: "https://10.0.0.2:6443",
		Endpoints:       map[string]string{"fleetd": "https://spore.lan:8443", "spire": "spore.lan:8081"},
		DNS:             []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("9.9.9.9")},
		NTP:             []string{"spore.lan"},
		Gateway:         netip.MustParseAddr("10.0.0.1"),
		Clock:           &renderClock{t: renderEpoch},
		Random:          rand.NewChaCha8([32]byte{1}),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := render.New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return r
}

func renderDevice(name, mac, addr, disk string) fleet.Device {
	d := fleet.Device{ID: 7, Name: name, Status: fleet.StatusStaged, Address: netip.MustParsePrefix(addr),
		Declared: fleet.Declaration{DiskSerial: disk}}
	if mac != "" {
		d.MACs = []fleet.MAC{fleet.MAC(mac)}
	}
	return d
}

var (
	talosWorker = fleet.Class{Name: "talos-worker", Kind: fleet.KindTalos, Installable: true,
		Talos: &fleet.TalosClass{MachineType: "worker"}}
	talosCP = fleet.Class{Name: "talos-cp", Kind: fleet.KindTalos, Installable: true,
		Talos: &fleet.TalosClass{MachineType: "controlplane"}}
	nixosClass   = fleet.Class{Name: "nixos-builder", Kind: fleet.KindNixOS, Installable: true, Profile: "builder"}
	alpineClass  = fleet.Class{Name: "alpine-edge", Kind: fleet.KindAlpine, Installable: true, Profile: "edge"}
	nocloudClass = fleet.Class{Name: "ubuntu", Kind: fleet.KindCloudInit, Installable: true,
		CloudInit: &fleet.CloudInitClass{UserData: "#cloud-config\npackages: [htop]\n"}}
	// renderFiles are node files as a provision passes them: the LAK chain as PEM and the AK blob,
	// which go-attestation's AK.Marshal() writes as JSON.
	renderFiles = []api.NodeFile{
		{Name: fleet.NodeFileLAKCert, Mode: 0o644, Data: []byte("-----BEGIN CERTIFICATE-----\nMIIBkTCCATegAwIBAgIQ: #x\n-----END CERTIFICATE-----\n")},
		{Name: fleet.NodeFileLAKBlob, Mode: 0o600, Data: []byte(`{"KeyEncoding":1,"TPMVersion":2,"Public":"AAEACwAFBHIAAAAQ","KeyBlob":"ACAg/w==","Name":""}`)},
	}
	renderID = fleet.NodeIdentity{UUID: "4c4c4544-0042-3510-8052-b2c04f4e4b32", Serial: "SYS123", Files: renderFiles,
		BootstrapToken: fleet.BootstrapToken{ID: "n0dea1", Secret: "k8sjoinsecret123"}}
)

func TestNewRendererRefusesBadConfig(t *testing.T) {
	sec, err := renderSecrets()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  render.Config
		want []string
	}{
		{"refuse/empty", render.Config{},
			[]string{"no clock", "no randomness", "no DNS servers", "gateway"}},
		{"refuse/bad-secrets", render.Config{TalosSecrets: []byte("cluster: [1"), ClusterName: "x",
			ClusterEndpoint: "https://a:6443", Clock: &renderClock{}, Random: rand.NewChaCha8([32]byte{}),
			DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: netip.MustParseAddr("10.0.0.1")},
			[]string{"decode Talos secrets bundle"}},
		{"refuse/incomplete-secrets", render.Config{TalosSecrets: []byte("cluster:\n  id: x\n"), ClusterName: "x",
			ClusterEndpoint: "https://a:6443", Clock: &renderClock{}, Random: rand.NewChaCha8([32]byte{}),
			DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: netip.MustParseAddr("10.0.0.1")},
			[]string{"check Talos secrets bundle", "cluster.secret is required", "talosctl gen secrets"}},
		{"refuse/talos-endpoint-version-name", render.Config{TalosSecrets: sec, TalosVersion: "eleven",
			ClusterEndpoint: "10.0.0.2:6443", Clock: &renderClock{}, Random: rand.NewChaCha8([32]byte{}),
			DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: netip.MustParseAddr("10.0.0.1"),
			Endpoints: map[string]string{"Fleet D": "x"}},
			[]string{`parse Talos version "eleven"`, "no cluster name", "must be an https URL", `endpoint name "Fleet D"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render.New(tc.cfg)
			if err == nil {
				t.Fatal("New accepted the config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestRenderRefusals(t *testing.T) {
	r := newTestRenderer(t, nil)
	noTalos := newTestRenderer(t, func(c *render.Config) { c.TalosSecrets = nil })
	ok := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	mod := func(f func(*fleet.Device)) fleet.Device { d := ok; f(&d); return d }
	cases := []struct {
		name     string
		r        *render.Renderer
		d        fleet.Device
		c        fleet.Class
		id       fleet.NodeIdentity
		rejected bool // wraps ErrConfigRejected (the declaration is wrong) or not (fleetd is)
		want     string
	}{
		{"refuse/no-mac", r, mod(func(d *fleet.Device) { d.MACs = nil }), talosWorker, renderID, true, "no MAC"},
		{"refuse/no-address", r, mod(func(d *fleet.Device) { d.Address = netip.Prefix{} }), nixosClass, renderID, true, "no primary IPv4"},
		{"refuse/ipv6-address", r, mod(func(d *fleet.Device) { d.Address = netip.MustParsePrefix("fd00::5/64") }), nixosClass, renderID, true, "no primary IPv4"},
		{"refuse/host-prefix", r, mod(func(d *fleet.Device) { d.Address = netip.MustParsePrefix("10.0.0.5/32") }), nocloudClass, renderID, true, "no room for a gateway"},
		{"refuse/gateway-outside", r, mod(func(d *fleet.Device) { d.Address = netip.MustParsePrefix("10.0.1.5/24") }), talosWorker, renderID, true, "gateway 10.0.0.1 is not inside the device's network 10.0.1.0/24"},
		{"refuse/address-is-gateway", r, mod(func(d *fleet.Device) { d.Address = netip.MustParsePrefix("10.0.0.1/24") }), nixosClass, renderID, true, "is the gateway's"},
		{"refuse/bad-hostname", r, mod(func(d *fleet.Device) { d.Name = "Node_A" }), alpineClass, renderID, true, "not a valid hostname"},
		{"refuse/talos-no-disk-serial", r, mod(func(d *fleet.Device) { d.Declared.DiskSerial = "" }), talosWorker, renderID, true, "disk_serial is empty"},
		{"refuse/talos-glob-disk-serial", r, mod(func(d *fleet.Device) { d.Declared.DiskSerial = "S1*" }), talosWorker, renderID, true, "glob character"},
		{"refuse/talos-without-secrets", noTalos, ok, talosWorker, renderID, false, "no Talos secrets bundle"},
		{"refuse/seed-no-profile", r, ok, fleet.Class{Name: "n", Kind: fleet.KindNixOS}, renderID, true, "names no profile"},
		{"refuse/seed-no-uuid", r, ok, nixosClass, fleet.NodeIdentity{}, true, "no attested SMBIOS UUID"},
		{"refuse/nocloud-no-user-data", r, ok, fleet.Class{Name: "u", Kind: fleet.KindCloudInit}, renderID, true, "no cloud_init.user_data"},
		{"refuse/unknown-kind", r, ok, fleet.Class{Name: "w", Kind: "windows"}, renderID, true, `kind "windows"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := tc.r.Render(tc.d, tc.c, tc.id)
			if err == nil {
				t.Fatalf("Render returned a %d-byte config, want a refusal", len(nc.Body))
			}
			if got := errors.Is(err, fleet.ErrConfigRejected); got != tc.rejected {
				t.Errorf("errors.Is(err, ErrConfigRejected) = %v, want %v (err: %v)", got, tc.rejected, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "config for "+tc.d.Name) {
				t.Errorf("error %q does not name the device", err)
			}
		})
	}
}

func TestRenderSeed(t *testing.T) {
	r := newTestRenderer(t, nil)
	d := renderDevice("node-b", "00:11:22:33:44:55", "10.0.0.6/24", "NVME-9")
	for _, c := range []fleet.Class{nixosClass, alpineClass} {
		t.Run("ok/"+string(c.Kind), func(t *testing.T) {
			nc, err := r.Render(d, c, renderID)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if nc.Kind != c.Kind || nc.ContentType != "application/json" {
				t.Errorf("kind %q content type %q", nc.Kind, nc.ContentType)
			}
			var s map[string]any
			if err := json.Unmarshal(nc.Body, &s); err != nil {
				t.Fatalf("seed is not JSON: %v", err)
			}
			want := map[string]any{
				"version": 2.0, "hostname": "node-b", "class": c.Name, "kind": string(c.Kind), "profile": c.Profile,
				"address": "10.0.0.6/24", "gateway": "10.0.0.1",
				"dns":       []any{"10.0.0.1", "9.9.9.9"},
				"ntp":       []any{"spore.lan"},
				"endpoints": map[string]any{"fleetd": "https://spore.lan:8443", "spire": "spore.lan:8081"},
				"device": map[string]any{"name": "node-b", "netbox_id": 7.0, "mac": "00:11:22:33:44:55",
					"uuid": renderID.UUID, "serial": "SYS123", "disk_serial": "NVME-9"},
				"files": []any{
					map[string]any{"path": "/var/lib/fleetd-node/lak.pem", "mode": "0644", "content_base64": base64.StdEncoding.EncodeToString(renderFiles[0].Data)},
					map[string]any{"path": "/var/lib/fleetd-node/lak.blob", "mode": "0600", "content_base64": base64.StdEncoding.EncodeToString(renderFiles[1].Data)},
				},
			}
			for k, v := range want {
				if got, _ := json.Marshal(s[k]); string(got) != mustJSON(t, v) {
					t.Errorf("seed %q = %s, want %s", k, got, mustJSON(t, v))
				}
			}
			if len(s) != len(want) {
				t.Errorf("seed has %d keys, the schema documents %d: %v", len(s), len(want), s)
			}
			if want := "seed for node-b (profile " + c.Profile + ", 10.0.0.6/24, endpoints fleetd, spire)"; !strings.Contains(nc.Summary, want) {
				t.Errorf("summary %q, want it to contain %q", nc.Summary, want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

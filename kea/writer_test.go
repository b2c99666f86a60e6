package kea

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

// runningKea starts kea-dhcp4 on the example configuration (no interfaces, everything in a temp
// dir) and waits until its control socket answers. The reservations file must exist first.
func runningKea(t *testing.T, dir, reservations string) (socket string, log *bytes.Buffer) {
	t.Helper()
	conf := keaConfig(t, dir, reservations)
	log = &bytes.Buffer{}
	cmd := exec.Command(keaBinary(t), "-c", conf)
	cmd.Env = append(os.Environ(), "KEA_LOCKFILE_DIR="+dir, "KEA_PIDFILE_DIR="+dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kea-dhcp4: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = <-exited // killed by this cleanup: its exit status says only that
		if t.Failed() {
			t.Logf("kea-dhcp4 log:\n%s", log)
		}
	})
	socket = filepath.Join(dir, "ctl.sock")
	for range 200 {
		select {
		case err := <-exited:
			t.Fatalf("kea-dhcp4 exited at start: %v\n%s", err, log)
		default:
		}
		if _, err := command(context.Background(), socket, "version-get", time.Second); err == nil {
			return socket, log
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("kea-dhcp4's control socket %s never answered:\n%s", socket, log)
	return "", nil
}

// keaReservations reads the subnet's reservations back from the running Kea with config-get
// (Kea 2.2's open-source build has no host_cmds hook for reservation-get).
func keaReservations(t *testing.T, socket string) []Reservation {
	t.Helper()
	args, err := command(context.Background(), socket, "config-get", 5*time.Second)
	if err != nil {
		t.Fatalf("config-get: %v", err)
	}
	var cfg struct {
		Dhcp4 struct {
			Subnet4 []struct {
				Reservations []Reservation `json:"reservations"`
			} `json:"subnet4"`
		} `json:"Dhcp4"`
	}
	if err := json.Unmarshal(args, &cfg); err != nil {
		t.Fatalf("decode config-get: %v", err)
	}
	if len(cfg.Dhcp4.Subnet4) != 1 {
		t.Fatalf("config-get shows %d subnets, want 1", len(cfg.Dhcp4.Subnet4))
	}
	return cfg.Dhcp4.Subnet4[0].Reservations
}

type fileID struct {
	ino   uint64
	mtime time.Time
}

func statFile(t *testing.T, path string) fileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileID{ino: fi.Sys().(*syscall.Stat_t).Ino, mtime: fi.ModTime()}
}

func newTestWriter(t *testing.T, cfg Config) (*Writer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registry, cfg.Logger = reg, zerolog.New(zerolog.NewTestWriter(t))
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, reg
}

func TestSyncReloadsRunningKea(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet", "reservations.json")
	if err := writeAtomic(path, []byte("[]\n")); err != nil { // what Kea starts with
		t.Fatal(err)
	}
	socket, _ := runningKea(t, dir, path)
	w, _ := newTestWriter(t, Config{Path: path, ControlSocket: socket, Subnet: testSubnet})
	ctx := context.Background()
	reloads := func(outcome string) float64 { return testutil.ToFloat64(w.reloads.WithLabelValues(outcome)) }

	// ok/new-device: written, reloaded, and Kea serves the reservation.
	a := dev(1, "node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24")
	changed, err := w.Sync(ctx, []fleet.Device{a})
	if err != nil || !changed {
		t.Fatalf("Sync = %v, %v; want a write and a reload", changed, err)
	}
	want := []Reservation{{HWAddress: "3c:ec:ef:4c:4f:54", IPAddress: "10.0.0.5", Hostname: "node-a"}}
	if got := keaReservations(t, socket); !equalReservations(got, want) {
		t.Fatalf("Kea serves %+v, want %+v", got, want)
	}
	if reloads(ReloadOK) != 1 || testutil.ToFloat64(w.reservations) != 1 {
		t.Errorf("reloads ok %v, reservations gauge %v", reloads(ReloadOK), testutil.ToFloat64(w.reservations))
	}

	// ok/unchanged: no write (same inode and mtime), no reload.
	before := statFile(t, path)
	changed, err = w.Sync(ctx, []fleet.Device{a, dev(2, "switch", "", "10.0.0.2/24")})
	if err != nil || changed {
		t.Fatalf("Sync of unchanged content = %v, %v; want nothing done", changed, err)
	}
	if after := statFile(t, path); after != before {
		t.Errorf("the file was rewritten: %+v then %+v", before, after)
	}
	if reloads(ReloadOK) != 1 {
		t.Errorf("Kea was reloaded for unchanged content (%v reloads)", reloads(ReloadOK))
	}

	// ok/second-device: a new file (new inode) and Kea sees both.
	b := dev(2, "node-b", "3c:ec:ef:4c:4f:55", "10.0.0.6/24")
	if changed, err = w.Sync(ctx, []fleet.Device{b, a}); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	if statFile(t, path).ino == before.ino {
		t.Error("the file was not replaced by rename")
	}
	want = append(want, Reservation{HWAddress: "3c:ec:ef:4c:4f:55", IPAddress: "10.0.0.6", Hostname: "node-b"})
	if got := keaReservations(t, socket); !equalReservations(got, want) {
		t.Fatalf("Kea serves %+v, want %+v", got, want)
	}
	if reloads(ReloadOK) != 2 || testutil.ToFloat64(w.reservations) != 2 {
		t.Errorf("reloads ok %v, reservations gauge %v", reloads(ReloadOK), testutil.ToFloat64(w.reservations))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left next to the reservations: %v", entries)
	}
}

func TestSyncKeaRefusesReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reservations.json")
	if err := writeAtomic(path, []byte("[]\n")); err != nil {
		t.Fatal(err)
	}
	socket, _ := runningKea(t, dir, path)
	// No subnet filter: a device outside the subnet reaches the file and Kea refuses it.
	w, _ := newTestWriter(t, Config{Path: path, ControlSocket: socket})
	ctx := context.Background()
	far := []fleet.Device{dev(1, "far", "3c:ec:ef:4c:4f:54", "192.168.1.5/24")}

	changed, err := w.Sync(ctx, far)
	if !changed || !errors.Is(err, ErrKeaRefused) || !strings.Contains(err.Error(), "not within the IPv4 subnet") {
		t.Fatalf("Sync = %v, %v; want the file written and Kea's refusal with its reason", changed, err)
	}
	// refuse/retried: the content is unchanged, but the failed reload is tried again.
	changed, err = w.Sync(ctx, far)
	if changed || !errors.Is(err, ErrKeaRefused) {
		t.Fatalf("second Sync = %v, %v; want no write and the reload retried", changed, err)
	}
	if got := testutil.ToFloat64(w.reloads.WithLabelValues(ReloadRefused)); got != 2 {
		t.Errorf("refused reloads = %v, want 2", got)
	}
	if got := keaReservations(t, socket); len(got) != 0 {
		t.Errorf("Kea took the refused reservations: %+v", got)
	}
	// ok/fixed: the owner fixes the address; Kea accepts.
	if _, err := w.Sync(ctx, []fleet.Device{dev(1, "far", "3c:ec:ef:4c:4f:54", "10.0.0.5/24")}); err != nil {
		t.Fatalf("Sync after the fix: %v", err)
	}
	if got := keaReservations(t, socket); len(got) != 1 {
		t.Errorf("Kea serves %+v after the fix", got)
	}
}

func TestSyncWithoutKea(t *testing.T) {
	dir := t.TempDir()
	devices := []fleet.Device{dev(1, "node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24")}
	t.Run("ok/no-control-socket-writes-only", func(t *testing.T) {
		path := filepath.Join(dir, "a", "reservations.json")
		w, _ := newTestWriter(t, Config{Path: path})
		if changed, err := w.Sync(context.Background(), devices); err != nil || !changed {
			t.Fatalf("Sync = %v, %v", changed, err)
		}
		body, _ := os.ReadFile(path)
		if want, _ := Render(devices); !bytes.Equal(body, want) {
			t.Errorf("file %s, want %s", body, want)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("file mode %v, want 0644 so Kea's user can read it", fi.Mode().Perm())
		}
	})
	t.Run("refuse/socket-unreachable", func(t *testing.T) {
		path := filepath.Join(dir, "b", "reservations.json")
		w, _ := newTestWriter(t, Config{Path: path, ControlSocket: filepath.Join(dir, "nobody.sock")})
		changed, err := w.Sync(context.Background(), devices)
		if !changed || err == nil || errors.Is(err, ErrKeaRefused) || !strings.Contains(err.Error(), "connect to Kea control socket") {
			t.Fatalf("Sync = %v, %v; want the file written and an unreachable-socket error", changed, err)
		}
		if got := testutil.ToFloat64(w.reloads.WithLabelValues(ReloadUnreachable)); got != 1 {
			t.Errorf("unreachable reloads = %v, want 1", got)
		}
	})
}

// TestSyncWritesOnlyChanges: the periodic reconcile syncs at every pass, and the file is replaced
// only when a reservation changed (fleetd_kea_writes_total counts the replacements), so Kea's
// include and the disk see nothing of a pass that changed nothing.
func TestSyncWritesOnlyChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.json")
	w, _ := newTestWriter(t, Config{Path: path})
	devices := []fleet.Device{dev(1, "node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24"), dev(2, "node-b", "3c:ec:ef:4c:4f:55", "10.0.0.6/24")}
	sync := func(want bool) os.FileInfo {
		t.Helper()
		if changed, err := w.Sync(context.Background(), devices); err != nil || changed != want {
			t.Fatalf("Sync = %v, %v; want changed %v", changed, err, want)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	first := sync(true)
	if again := sync(false); !os.SameFile(first, again) {
		t.Errorf("a sync with no reservation changed replaced the file")
	}
	devices[1] = dev(2, "node-b", "3c:ec:ef:4c:4f:55", "10.0.0.7/24")
	if moved := sync(true); os.SameFile(first, moved) {
		t.Errorf("a changed address did not replace the file")
	}
	if got := testutil.ToFloat64(w.writes); got != 2 {
		t.Errorf("fleetd_kea_writes_total = %v, want 2 (the first sync and the changed address)", got)
	}
}

func TestNewWriterRefuses(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"refuse/relative-path", Config{Path: "reservations.json"}, "not absolute"},
		{"refuse/relative-socket", Config{Path: "/x/r.json", ControlSocket: "kea.sock"}, "control socket"},
		{"refuse/subnet-not-network", Config{Path: "/x/r.json", Subnet: netip.MustParsePrefix("10.0.0.5/24")}, "not an IPv4 network address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewWriter(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewWriter = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func equalReservations(a, b []Reservation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

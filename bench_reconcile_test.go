package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goattest "github.com/google/go-attestation/attest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/cli"
	"github.com/folly-infra/fleetd/dev/benchcpu"
	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/kea"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/netbox/layout"
)

// BenchmarkReconcilePass measures one periodic reconcile pass in the steady state, as `fleetd
// serve` runs it every reconcile.interval (fleet.Requests.Run): Requests.ReconcileAll, then the
// listing's hook (afterListing: the Kea reservations, the join deadlines, the left Nodes), then
// the collection and release that follows every pass (Config.AfterSweep). The fleet is N sealed,
// running nodes with four interfaces each (eth0 and eth1 with a MAC, eth2 without, a bmc), their
// fields as large as a real node's (seedActive: some 9 KB of JSON each, the identity's two
// certificate chains most of it), on a NetBox emulator with no added latency; every device is
// seeded sealed with the signing key, nothing needs attention, nobody else writes. One pass runs before the measure: the first after a
// start reads the change log back over its whole retention.
//
// It reports per pass: netbox-requests (and a figure per endpoint, req-ROUTE), devices-read (the
// requests for one device: the target is none in the steady state), cpu-ns/op (dev/benchcpu: the
// emulator runs in a process of its own, so this and the allocations are fleetd's alone; the wall
// time includes the emulator's answers), kea-writes (the reservations file is rewritten only
// when a reservation changed), and live-heap-MiB: the heap fleetd holds between passes, after a
// collection (the node view, the address index, the metrics' samples; the benchmark's own few
// MB included). docs/performance.md, "The steady state's reconcile pass", has the figures.
func BenchmarkReconcilePass(b *testing.B) {
	for _, n := range []int{1000, 3000, 10000} {
		b.Run(fmt.Sprintf("devices-%d", n), func(b *testing.B) {
			p := newPassFleet(b, n)
			ctx := context.Background()
			p.pass(b, ctx) // the first pass reads the change log back over its whole retention
			if sealed := p.gauge(b, "fleetd_sealed_devices", fleettest.SealKeys().Signing()); sealed != float64(n) {
				b.Fatalf("after the warm-up %v devices are sealed with the signing key, want all %d: the pass measured would not be the steady state's", sealed, n)
			}
			before := p.netbox.counts(b)
			writes := p.keaWrites(b)
			stop := benchcpu.Start(b)
			for b.Loop() {
				p.pass(b, ctx)
			}
			stop()
			after := p.netbox.counts(b)
			total, perDevice := int64(0), int64(0)
			for route, c := range after {
				d := c - before[route]
				if d == 0 {
					continue
				}
				total += d
				if strings.Contains(route, "{id}") {
					perDevice += d
				}
				b.ReportMetric(float64(d)/float64(b.N), "req-"+routeMetric(route)+"/pass")
			}
			b.ReportMetric(float64(total)/float64(b.N), "netbox-requests/pass")
			b.ReportMetric(float64(perDevice)/float64(b.N), "devices-read/pass")
			b.ReportMetric(float64(p.keaWrites(b)-writes)/float64(b.N), "kea-writes/pass")
			// What fleetd holds between passes: the live heap once the pass's garbage is
			// collected (the node view, the address index, the metrics' samples, the caches).
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
		})
	}
}

// BenchmarkKeaSync measures the Kea reservations file's sync for 10,000 devices with three MACs
// each: changed, when one reservation changed at every round (render, compare, atomic replace with
// fsync: the write the target bounds); unchanged, the steady state's pass (render, read the file,
// compare, no write).
func BenchmarkKeaSync(b *testing.B) {
	for _, tc := range []struct {
		name   string
		change bool
	}{{"changed", true}, {"unchanged", false}} {
		b.Run(tc.name, func(b *testing.B) {
			devices := make([]fleet.Device, 10000)
			for i := range devices {
				devices[i] = keaDevice(i)
			}
			path := filepath.Join(b.TempDir(), "reservations.json")
			w, err := kea.NewWriter(kea.Config{Path: path, Subnet: netip.MustParsePrefix("10.20.0.0/16"), Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := w.Sync(ctx, devices); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				if tc.change {
					i++
					devices[0].Address = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 20, 250, byte(i%200 + 1)}), 16)
				}
				changed, err := w.Sync(ctx, devices)
				if err != nil {
					b.Fatal(err)
				}
				if changed != tc.change {
					b.Fatalf("Sync wrote the file: %v, want %v", changed, tc.change)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/sync")
			info, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(info.Size())/1024, "file-KiB")
		})
	}
}

// passFleet is the service and Kea writer one BenchmarkReconcilePass size runs, and the NetBox
// emulator it reads, in a process of its own (netboxChild) so that the process's CPU time and
// the benchmark's allocations are fleetd's alone.
type passFleet struct {
	netbox *netboxChild
	app    *app
	reg    *prometheus.Registry
}

func newPassFleet(b *testing.B, n int) *passFleet {
	b.Helper()
	emu := startNetBoxChild(b, n)
	reg := prometheus.NewRegistry()
	nb, err := netbox.New(netbox.Config{URL: emu.URL, Token: emu.Token, Registry: reg, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	catalog, err := cli.LoadCatalog("examples/classes.json")
	if err != nil {
		b.Fatal(err)
	}
	svc, err := fleet.NewService(fleet.Config{FleetdURL: "http://127.0.0.1:9", ServiceUser: passUser},
		fleet.Deps{NetBox: nb, ChangeLog: nb, Seal: fleettest.SealKeys(), Installer: idleInstaller{}, Catalog: catalog,
			Clock: fleet.SystemClock{}, Random: rand.Reader, Logger: zerolog.Nop(), Registry: reg, DeviceRegistry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	w, err := kea.NewWriter(kea.Config{Path: filepath.Join(b.TempDir(), "reservations.json"),
		Subnet: netip.MustParsePrefix("10.20.0.0/16"), Logger: zerolog.Nop(), Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	return &passFleet{netbox: emu, reg: reg, app: &app{log: zerolog.Nop(), service: svc, netbox: nb, kea: w}}
}

// passUser is fleetd's NetBox user in BenchmarkReconcilePass.
const passUser = "fleetd"

// netboxChildEnv, set to a number of devices, makes the test binary a NetBox emulator holding
// that many devices (seedActive) instead of running tests (TestMain): it writes its URL and
// fleetd's token as one JSON line, then answers each line "counts" on its input with its
// RequestCounts as one JSON line, until its input ends.
const netboxChildEnv = "FLEETD_BENCH_NETBOX_DEVICES"

func TestMain(m *testing.M) {
	if n := os.Getenv(netboxChildEnv); n != "" {
		os.Exit(serveNetBoxChild(n))
	}
	os.Exit(m.Run())
}

// netboxChild is the emulator's process as the benchmark sees it.
type netboxChild struct {
	URL, Token string
	in         io.WriteCloser
	out        *bufio.Scanner
}

func startNetBoxChild(b *testing.B, n int) *netboxChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", netboxChildEnv, n))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the NetBox emulator's process: %v", err)
	}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("the NetBox emulator's process: %v", err)
		}
	})
	c := &netboxChild{in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(nil, 1<<20)
	if !c.out.Scan() {
		b.Fatalf("the NetBox emulator's process did not start: %v", c.out.Err())
	}
	if err := json.Unmarshal(c.out.Bytes(), c); err != nil {
		b.Fatalf("the NetBox emulator's process: %q: %v", c.out.Text(), err)
	}
	return c
}

// counts is the emulator's RequestCounts.
func (c *netboxChild) counts(b *testing.B) map[string]int64 {
	b.Helper()
	if _, err := io.WriteString(c.in, "counts\n"); err != nil {
		b.Fatal(err)
	}
	if !c.out.Scan() {
		b.Fatalf("the NetBox emulator's process did not answer: %v", c.out.Err())
	}
	var m map[string]int64
	if err := json.Unmarshal(c.out.Bytes(), &m); err != nil {
		b.Fatal(err)
	}
	return m
}

// serveNetBoxChild is the emulator's process (netboxChildEnv); its exit code.
func serveNetBoxChild(devices string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "the benchmark's NetBox emulator:", err)
		return 1
	}
	n, err := strconv.Atoi(devices)
	if err != nil {
		return fail(err)
	}
	emu, err := netboxemu.Start(netboxemu.Config{})
	if err != nil {
		return fail(err)
	}
	defer emu.Close()
	raw, err := os.ReadFile("netbox-webhooks.yaml")
	if err != nil {
		return fail(err)
	}
	// No fleetd listens there: the pass is driven directly.
	if err := emu.LoadSchema(raw, "http://127.0.0.1:9", "bench"); err != nil {
		return fail(err)
	}
	token, err := emu.AddToken(netboxemu.TokenSpec{User: passUser})
	if err != nil {
		return fail(err)
	}
	keys := fleettest.SealKeys()
	node, err := newBenchNode()
	if err != nil {
		return fail(err)
	}
	for i := range n {
		if err := seedActive(emu, keys, node, i); err != nil {
			return fail(err)
		}
	}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(map[string]string{"URL": emu.URL(), "Token": token}); err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if err := out.Encode(emu.RequestCounts()); err != nil {
			return fail(err)
		}
	}
	return 0
}

// pass is one turn of fleet.Requests.Run's loop, with a workload cluster that has every active
// device's Node.
func (p *passFleet) pass(b *testing.B, ctx context.Context) {
	devices, err := p.app.service.Requests.ReconcileAll(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p.app.afterListing(ctx, devices, func(string) (fleet.NodeReport, bool) { return fleet.NodeReport{Ready: true}, true })
	debug.FreeOSMemory() // Config.AfterSweep in `fleetd serve`
}

// keaWrites is fleetd_kea_writes_total: how many times the Kea writer replaced its file so far.
func (p *passFleet) keaWrites(b *testing.B) int {
	return int(p.gauge(b, "fleetd_kea_writes_total", ""))
}

// gauge is the value of the series of metric name whose one label has value label ("": the
// metric's only series), a gauge's or a counter's.
func (p *passFleet) gauge(b *testing.B, name, label string) float64 {
	b.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	b.Fatalf("no series %s{%s} in the registry", name, label)
	return 0
}

// seedActive adds device i as a running node's fields are: status active, fleet_state active
// after a provision, its boot checked ok, declared as a talos-worker, with four interfaces and an
// address in 10.20.0.0/16, and the fields fleetd owns as large as a real node's (n.node: its
// identity's two certificate chains with their keys, its facts, a boot baseline from a real
// event log), sealed with the signing key of keys. The seal names the device's id, so the
// emulator's next id must be i+1 (a new emulator seeded in order).
func seedActive(emu *netboxemu.Emulator, keys *fleet.SealKeys, n *benchNode, i int) error {
	name := fmt.Sprintf("pass-%05d", i)
	mac := func(nic int) string {
		return fmt.Sprintf("02:f7:%02x:%02x:%02x:%02x", nic, i>>16&0xff, i>>8&0xff, i&0xff)
	}
	id := int64(i + 1)
	fields, err := n.fields(i, name, mac(0))
	if err != nil {
		return err
	}
	d, err := netbox.FieldsOf(fields)
	if err != nil {
		return err
	}
	fields["fleet_seal"] = keys.Seal(id, d.Owned, time.Now())
	got, err := emu.AddDevice(netboxemu.DeviceSpec{Name: name, Status: "active", PrimaryIPv4: fmt.Sprintf("10.20.%d.%d/16", i/250, i%250+1),
		Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{mac(0)}}, {Name: "eth1", MACs: []string{mac(1)}},
			{Name: "eth2"}, {Name: "bmc", MgmtOnly: true, MACs: []string{mac(3)}}},
		CustomFields: fields})
	if err != nil {
		return fmt.Errorf("add %s: %w", name, err)
	}
	if got != id {
		return fmt.Errorf("add %s: the emulator gave it id %d, its seal names %d", name, got, id)
	}
	return nil
}

// benchNode makes the fields fleetd owns of a running node: one CA and key issue every node's
// LDevID and LAK certificate (real DER, parsed by the pass's certificate times), and the boot
// baseline is one real event log's.
type benchNode struct {
	ca       *x509.Certificate
	caDER    []byte
	key      *ecdsa.PrivateKey
	baseline string
}

func newBenchNode() (*benchNode, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	el, err := goattest.ParseEventLog(eventlogs.RHEL8SecureBoot)
	if err != nil {
		return nil, err
	}
	return &benchNode{ca: ca, caDER: der, key: key, baseline: attest.NewBaseline(el.Events(goattest.HashSHA256)).String()}, nil
}

// leaf is a certificate of the node's name with serial.
func (n *benchNode) leaf(name string, serial int64) ([]byte, error) {
	tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().AddDate(0, 0, 90), KeyUsage: x509.KeyUsageDigitalSignature}
	return x509.CreateCertificate(rand.Reader, tpl, n.ca, &n.key.PublicKey, n.key)
}

// fields are node i's custom fields: its declaration and the fields fleetd owns of a running node.
func (n *benchNode) fields(i int, name, bootMAC string) (map[string]any, error) {
	random := func(size int) []byte {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		return b
	}
	hexOf := func(size int) string { return hex.EncodeToString(random(size)) }
	ldevid, err := n.leaf(name, int64(2*i+1))
	if err != nil {
		return nil, err
	}
	lak, err := n.leaf(name, int64(2*i+2))
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	req := fmt.Sprintf("provision-%08d", i)
	ek, uuid, disk := hexOf(32), hexOf(32), fmt.Sprintf("PASS%05dDISK", i)
	id := fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: req, Name: name, Issued: now.Add(-24 * time.Hour),
		Expires: now.Add(-23 * time.Hour), UUIDSHA256: uuid, SMBIOSSerial: fmt.Sprintf("SYS%05d", i), FetchSecretSHA256: hexOf(32), EKSHA256: ek,
		LAK:               fleet.LAKMaterial{Chain: [][]byte{lak, n.caDER}, Blob: random(700)},
		LDevID:            fleet.LDevIDMaterial{Chain: [][]byte{ldevid, n.caDER}, Public: random(90), Private: random(222)},
		BootstrapTokenKey: "test", KubeletClient: &fleet.ApprovedCSR{Name: "csr-" + hexOf(4), UID: hexOf(16), Approved: now.Add(-23 * time.Hour)},
		Delivered: now.Add(-23 * time.Hour)}
	learned := layout.Learned{Since: now.Add(-24 * time.Hour), Source: layout.FactsFromEnrollment}
	facts := layout.Facts{Version: layout.FactsVersion,
		Proved:  layout.ProvedFacts{EKSHA256: ek, TPMVersion: "2.0", Learned: learned},
		Claimed: layout.ClaimedFacts{SMBIOSUUIDSHA256: uuid, Disks: []layout.FactDisk{{Serial: disk, Path: "/dev/disk/by-id/nvme-" + disk}}, DisksFound: 1, MAC: bootMAC, Learned: learned}}
	out := map[string]any{"fleet_class": "talos-worker", "disk_serial": disk, "ek_sha256": ek, "fleet_state": string(fleet.StateActive),
		"fleet_request": req, "fleet_workflow": fleet.WorkflowName(name, req), "ldevid_serial": fmt.Sprintf("%x", 2*i+1), "lak_serial": fmt.Sprintf("%x", 2*i+2),
		"boot_baseline": n.baseline, "last_boot_check": now.Add(-time.Duration(i%3600) * time.Second).Format(time.RFC3339Nano), "boot_check": string(fleet.BootCheckOK)}
	for key, v := range map[string]any{"fleet_identity": id, "fleet_facts": facts} {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		var obj any
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, err
		}
		out[key] = obj
	}
	return out, nil
}

// keaDevice is a listed device as seedActive makes it: three MACs (eth0, eth1, the bmc) and an
// address in 10.20.0.0/16.
func keaDevice(i int) fleet.Device {
	mac := func(nic int) fleet.MAC {
		return fleet.MAC(fmt.Sprintf("02:f7:%02x:%02x:%02x:%02x", nic, i>>16&0xff, i>>8&0xff, i&0xff))
	}
	return fleet.Device{ID: int64(i + 1), Name: fmt.Sprintf("kea-%05d", i), Status: fleet.StatusActive,
		MACs:    []fleet.MAC{mac(0), mac(1), mac(3)},
		Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 20, byte(i / 250), byte(i%250 + 1)}), 16)}
}

// routeMetric is a route as a metric unit: "GET /api/dcim/devices/{id}/" → "GET-dcim-devices-id".
func routeMetric(route string) string {
	f := strings.FieldsFunc(strings.TrimPrefix(strings.Replace(route, " /api/", "/", 1), "/"), func(r rune) bool {
		return r == '/' || r == '{' || r == '}' || r == ' '
	})
	return strings.Join(slices.DeleteFunc(f, func(s string) bool { return s == "" }), "-")
}

// idleInstaller is a Tinkerbell with no Workflow: nothing in the steady state asks it for one.
type idleInstaller struct{}

func (idleInstaller) Install(context.Context, fleet.WorkflowSpec) error { return nil }
func (idleInstaller) Workflow(context.Context, string) (fleet.WorkflowStatus, error) {
	return fleet.WorkflowStatus{}, fleet.ErrNotFound
}

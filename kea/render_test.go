package kea

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
)

// testSubnet is the subnet of examples/kea/kea-dhcp4.conf.
var testSubnet = netip.MustParsePrefix("10.0.0.0/24")

func dev(id int64, name, mac, addr string) fleet.Device {
	d := fleet.Device{ID: id, Name: name}
	if mac != "" {
		d.MACs = []fleet.MAC{fleet.MAC(mac)}
	}
	if addr != "" {
		d.Address = netip.MustParsePrefix(addr)
	}
	return d
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		devices []fleet.Device
		want    string // the rendered file
		skipped string // "device:reason" in order
	}{
		{"ok/none", nil, "[]\n", ""},
		{"ok/ordered-by-address", []fleet.Device{
			dev(2, "node-b", "3c:ec:ef:4c:4f:55", "10.0.0.20/24"),
			dev(1, "Node-A", "3C-EC-EF-4C-4F-54", "10.0.0.5/24"),
		}, "[\n" +
			`  {"hw-address":"3c:ec:ef:4c:4f:54","ip-address":"10.0.0.5","hostname":"node-a"},` + "\n" +
			`  {"hw-address":"3c:ec:ef:4c:4f:55","ip-address":"10.0.0.20","hostname":"node-b"}` + "\n]\n", ""},
		{"ok/hostname-omitted-when-invalid", []fleet.Device{dev(1, "rack 1 / pdu", "3c:ec:ef:4c:4f:54", "10.0.0.5/24")},
			"[\n" + `  {"hw-address":"3c:ec:ef:4c:4f:54","ip-address":"10.0.0.5"}` + "\n]\n", ""},
		{"ok/uses-primary-mac", []fleet.Device{{ID: 1, Name: "n", Address: netip.MustParsePrefix("10.0.0.5/24"),
			MACs: []fleet.MAC{"3c:ec:ef:4c:4f:54", "3c:ec:ef:4c:4f:99"}}},
			"[\n" + `  {"hw-address":"3c:ec:ef:4c:4f:54","ip-address":"10.0.0.5","hostname":"n"}` + "\n]\n", ""},
		{"refuse/no-mac-no-address-ipv6", []fleet.Device{
			dev(1, "switch", "", "10.0.0.2/24"),
			dev(2, "pdu", "3c:ec:ef:4c:4f:54", ""),
			dev(3, "v6", "3c:ec:ef:4c:4f:56", "fd00::5/64"),
		}, "[]\n", "pdu:no-ipv4 switch:no-mac v6:no-ipv4"},
		{"refuse/bad-mac", []fleet.Device{dev(1, "n", "3c:ec:ef", "10.0.0.5/24")}, "[]\n", "n:bad-mac"},
		{"refuse/outside-subnet", []fleet.Device{dev(1, "far", "3c:ec:ef:4c:4f:54", "10.9.0.5/24")}, "[]\n", "far:outside-subnet"},
		{"refuse/duplicates-lower-id-wins", []fleet.Device{
			dev(9, "newer-mac", "3c:ec:ef:4c:4f:54", "10.0.0.9/24"),
			dev(8, "newer-ip", "3c:ec:ef:4c:4f:58", "10.0.0.5/24"),
			dev(1, "older", "3c:ec:ef:4c:4f:54", "10.0.0.5/24"),
		}, "[\n" + `  {"hw-address":"3c:ec:ef:4c:4f:54","ip-address":"10.0.0.5","hostname":"older"}` + "\n]\n",
			"newer-ip:duplicate-ip newer-mac:duplicate-mac"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, skipped := Plan(tc.devices, testSubnet)
			body, err := Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.want {
				t.Errorf("file\n%s\nwant\n%s", body, tc.want)
			}
			var got []string
			for _, s := range skipped {
				got = append(got, s.Device+":"+string(s.Reason))
				if !strings.Contains(s.Detail, s.Device) {
					t.Errorf("skip detail %q does not name the device", s.Detail)
				}
			}
			if strings.Join(got, " ") != tc.skipped {
				t.Errorf("skipped %v, want %s", got, tc.skipped)
			}
			if !json.Valid(body) {
				t.Errorf("file is not JSON: %s", body)
			}
		})
	}
}

func TestRenderDeterministic(t *testing.T) {
	devices := manyDevices(200)
	want, err := Render(devices)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		rng.Shuffle(len(devices), func(i, j int) { devices[i], devices[j] = devices[j], devices[i] })
		got, err := Render(devices)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatal("the same devices in another order render differently")
		}
	}
}

// manyDevices makes n validly declared devices in 10.0.0.0/16 with distinct MACs and addresses.
func manyDevices(n int) []fleet.Device {
	out := make([]fleet.Device, n)
	for i := range n {
		out[i] = dev(int64(i+1), fmt.Sprintf("node-%04d", i), fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff),
			fmt.Sprintf("10.0.%d.%d/16", (i+10)>>8, (i+10)&0xff))
	}
	return out
}

// keaConfig is examples/kea/kea-dhcp4.conf with its paths moved into dir and no interfaces, so
// the example the operator copies is the configuration under test.
func keaConfig(t *testing.T, dir, reservations string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "examples", "kea", "kea-dhcp4.conf"))
	if err != nil {
		t.Fatalf("read the example Kea config: %v", err)
	}
	s := string(raw)
	for old, repl := range map[string]string{
		`"/var/lib/kea/fleet/reservations.json"`: `"` + reservations + `"`,
		`"/run/kea/kea4-ctrl-socket"`:            `"` + filepath.Join(dir, "ctl.sock") + `"`,
		`"/var/lib/kea/kea-leases4.csv"`:         `"` + filepath.Join(dir, "leases4.csv") + `"`,
		`"interfaces": ["eth0"]`:                 `"interfaces": []`,
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("the example Kea config no longer contains %s: update this test with it", old)
		}
		s = strings.ReplaceAll(s, old, repl)
	}
	path := filepath.Join(dir, "kea-dhcp4.conf")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func keaBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kea-dhcp4")
	if err != nil {
		t.Fatalf("kea-dhcp4 is not installed (Debian package kea-dhcp4-server): %v", err)
	}
	return p
}

// keaCheck runs `kea-dhcp4 -t` on the example configuration including body.
func keaCheck(t *testing.T, body []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	res := filepath.Join(dir, "reservations.json")
	if err := os.WriteFile(res, body, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(keaBinary(t), "-t", keaConfig(t, dir, res))
	cmd.Env = append(os.Environ(), "KEA_LOCKFILE_DIR="+dir, "KEA_PIDFILE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestKeaAcceptsRenderedFile(t *testing.T) {
	messy := append(manyDevices(20),
		dev(100, "switch", "", "10.0.0.2/24"),
		dev(101, "dup-mac", "02:00:00:00:00:03", "10.0.0.250/24"),
		dev(102, "dup-ip", "02:00:00:00:ff:01", "10.0.0.13/24"),
		dev(103, "far", "02:00:00:00:ff:02", "192.168.1.5/24"),
	)
	cases := []struct {
		name    string
		devices []fleet.Device
		subnet  netip.Prefix
		ok      bool
		want    string // in kea's output when it refuses
	}{
		{"ok/zero-devices", nil, testSubnet, true, ""},
		{"ok/several-devices", manyDevices(5), testSubnet, true, ""},
		{"ok/conflicts-and-strangers-left-out", messy, testSubnet, true, ""},
		// Why the subnet filter exists: without it Kea refuses the whole configuration.
		{"refuse/outside-subnet-without-filter", messy, netip.Prefix{}, false, "is not within the IPv4 subnet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := Plan(tc.devices, tc.subnet)
			body, err := Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			out, err := keaCheck(t, body)
			if tc.ok && err != nil {
				t.Fatalf("kea-dhcp4 -t refused the file: %v\n%s\nfile:\n%s", err, out, body)
			}
			if !tc.ok && (err == nil || !strings.Contains(out, tc.want)) {
				t.Fatalf("kea-dhcp4 -t = %v, want a refusal saying %q:\n%s", err, tc.want, out)
			}
		})
	}
}

// BenchmarkRender1000 renders the reservations file for 1,000 devices.
func BenchmarkRender1000(b *testing.B) {
	devices := manyDevices(1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(devices); err != nil {
			b.Fatal(err)
		}
	}
}

// Render is the reservations file (the tests' shorthand for Plan and Marshal) for devices, with no subnet filter: a JSON array, one
// reservation per line, ordered by address. The same devices give the same bytes.
func Render(devices []fleet.Device) ([]byte, error) {
	res, _ := Plan(devices, netip.Prefix{})
	return Marshal(res)
}

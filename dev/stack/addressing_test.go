package stack

import (
	"crypto/rand"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// TestInventoryAddressing checks the machines' addressing (docs/design.md §8): every machine has its own loopback
// address 127.0.1.N/8 (N = index + 10), MACs and disk serials are unique, and fleetd's
// renderer accepts each validly declared device of every class kind with the stack's gateway
// 127.0.0.1 (Talos validates its config in metal mode), so phase 2's configurations render.
func TestInventoryAddressing(t *testing.T) {
	devices := SeedDevices(300)
	seen := map[string]string{}
	for i := range devices {
		a := address(i)
		if !a.Addr().IsLoopback() || a.Bits() != addrBits || !a.Masked().Contains(Gateway) || a.Addr() == Gateway {
			t.Errorf("device %d: address %s is not a loopback /8 around the gateway %s", i, a, Gateway)
		}
		for _, v := range []string{a.Addr().String(), mac(i), diskSerial(i)} {
			if other, dup := seen[v]; dup {
				t.Errorf("device %d and %s share %s", i, other, v)
			}
			seen[v] = devices[i].Name
		}
	}
	if got := address(0).String(); got != "127.0.1.10/8" {
		t.Errorf("first address = %s, want 127.0.1.10/8", got)
	}
	if got := address(250).String(); got != "127.0.2.4/8" {
		t.Errorf("address 250 = %s, want 127.0.2.4/8 (continuing past 127.0.1.255)", got)
	}

	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "examples", "classes.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	catalog, err := fleet.LoadCatalog(f)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := render.GenerateTalosSecrets(fleet.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := render.New(render.Config{TalosSecrets: secrets, ClusterName: "fleetsim",
		ClusterEndpoint: talosEndpoint(devices), DNS: []netip.Addr{Gateway}, Gateway: Gateway,
		Endpoints: map[string]string{"fleetd": "http://127.0.0.1:8080"}, Clock: fleet.SystemClock{}, Random: rand.Reader})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[fleet.Kind]bool{}
	for i, sd := range SeedDevices(0) {
		class, ok := catalog.Class(sd.Class)
		if sd.Faulty != "" || !ok {
			continue
		}
		d := fleet.Device{ID: int64(i + 1), Name: sd.Name, Status: fleet.StatusStaged, Address: address(i),
			MACs: []fleet.MAC{fleet.MAC(mac(i))}, Declared: fleet.Declaration{Class: sd.Class, DiskSerial: diskSerial(i)}}
		nc, err := r.Render(d, class, fleet.NodeIdentity{UUID: "4c4c4544-0042-3510-8052-b4c04f4e4e32", Serial: chassisSerial(i),
			BootstrapToken: fleet.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}})
		if err != nil {
			t.Errorf("ok/%s: render %s config: %v", sd.Name, class.Kind, err)
			continue
		}
		kinds[class.Kind] = true
		if class.Kind != fleet.KindCloudInit && !strings.Contains(string(nc.Body), address(i).Addr().String()) {
			t.Errorf("ok/%s: the %s config does not carry the address %s", sd.Name, class.Kind, address(i))
		}
	}
	for _, k := range fleet.Kinds {
		if !kinds[k] {
			t.Errorf("the example inventory renders no device of kind %s", k)
		}
	}
}

package render_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/cloudinit"
	"github.com/folly-infra/fleetd/fleet"
)

// exampleCatalog is examples/classes.json, the catalogue the docs and the dev stack use.
func exampleCatalog(t *testing.T) fleet.Catalog {
	t.Helper()
	f, err := os.Open("../examples/classes.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := fleet.LoadCatalog(f)
	if err != nil {
		t.Fatalf("examples/classes.json: %v", err)
	}
	return c
}

// TestNoCloudSeedCloudInitAccepts: for every cloud-init-nocloud class of examples/classes.json,
// real cloud-init (Debian's 22.4, installed by make deps; missing, the test fails) accepts what
// fleetd renders: its NoCloud datasource reads the seed directory the install Workflow writes
// (meta-data, user-data, vendor-data, network-config), `cloud-init schema` accepts the
// user-data and the vendor-data, and `cloud-init devel net-convert` renders the network config
// to netplan with the device's address, MAC and gateway.
func TestNoCloudSeedCloudInitAccepts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cloud-init (seconds per document)")
	}
	if _, err := cloudinit.Binary(); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	ctx := context.Background()
	cat := exampleCatalog(t)
	tested := 0
	for _, name := range cat.Names() {
		c, _ := cat.Class(name)
		if c.Kind != fleet.KindCloudInit || !c.Installable {
			continue
		}
		tested++
		t.Run(name, func(t *testing.T) {
			d := renderDevice("lab-1", "02:f5:00:00:00:0e", "10.0.0.14/24", "SSD-1")
			nc, err := newTestRenderer(t, nil).Render(d, c, renderID)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			names, files, _ := readTar(t, nc.Body)
			root := t.TempDir()
			seedDir := filepath.Join(root, "seed", "nocloud")
			if err := os.MkdirAll(seedDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if err := os.WriteFile(filepath.Join(seedDir, n), []byte(files[n]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			seed, err := cloudinit.ReadSeed(ctx, root)
			if err != nil || !seed.OK {
				t.Fatalf("cloud-init's NoCloud datasource: ok=%v %v", seed.OK, err)
			}
			if iid, _ := seed.MetaData["instance-id"].(string); !strings.HasPrefix(iid, "iid-lab-1-") || seed.MetaData["local-hostname"] != "lab-1" {
				t.Errorf("cloud-init read meta-data %v", seed.MetaData)
			}
			if seed.UserData != c.CloudInit.UserData || seed.VendorData != files["vendor-data"] || seed.VendorData == "" {
				t.Errorf("cloud-init read user-data %q and vendor-data %q", seed.UserData, seed.VendorData)
			}
			if seed.NetworkConfig["version"] != float64(2) {
				t.Errorf("cloud-init read network config %v, want version 2", seed.NetworkConfig)
			}
			for _, doc := range []string{"user-data", "vendor-data"} {
				if !cloudinit.IsCloudConfig(files[doc]) {
					continue // a script or MIME user-data: cloud-init schema does not check it
				}
				if err := cloudinit.Schema(ctx, []byte(files[doc])); err != nil {
					t.Errorf("%s: %v", doc, err)
				}
			}
			units, err := cloudinit.NetConvert(ctx, []byte(files["network-config"]))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Address=10.0.0.14/24", "MACAddress=02:f5:00:00:00:0e", "Name=nic0",
				"Gateway=10.0.0.1", "DNS=10.0.0.1 9.9.9.9", "DHCP=no"} {
				if !strings.Contains(units, want) {
					t.Errorf("the networkd unit cloud-init rendered lacks %q:\n%s", want, units)
				}
			}
		})
	}
	if tested == 0 {
		t.Fatal("examples/classes.json has no installable cloud-init-nocloud class to test")
	}
}

// TestCloudInitRefuses: the checks above can fail: cloud-init refuses what the example class
// ubuntu-lab had (a user with an empty ssh_authorized_keys list) and a network config it cannot
// read, in its own words.
func TestCloudInitRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cloud-init")
	}
	ctx := context.Background()
	old := "#cloud-config\nusers:\n  - name: ops\n    groups: [sudo]\n    ssh_authorized_keys: []\n"
	err := cloudinit.Schema(ctx, []byte(old))
	if err == nil || !strings.Contains(err.Error(), "users.0") || strings.Contains(err.Error(), os.TempDir()) {
		t.Errorf("cloud-init schema of the old ubuntu-lab user-data: %v, want a refusal naming users.0 (and no temporary path)", err)
	}
	bad := "version: 2\nethernets:\n  nic0:\n    addresses: [\"10.0.0.300/24\"]\n"
	if _, err := cloudinit.NetConvert(ctx, []byte(bad)); err == nil || !strings.Contains(err.Error(), "10.0.0.300") {
		t.Errorf("cloud-init net-convert of an address that is none: %v, want its ValueError naming it", err)
	}
	if !cloudinit.IsCloudConfig("#cloud-config\npackages: []\n") || cloudinit.IsCloudConfig("#!/bin/sh\necho hi\n") {
		t.Errorf("IsCloudConfig misreads the first line")
	}
}

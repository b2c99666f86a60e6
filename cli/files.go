package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/cloudinit"
	"github.com/folly-infra/fleetd/fleet"
)

// The owner's files as fleetd reads them: `fleetd check` validates them with these functions,
// and `fleetd serve` loads them with the same ones at its start, so that it refuses to start on
// what fleetd check refuses.

// LoadCatalog reads classes.json (fleet.LoadCatalog).
func LoadCatalog(path string) (fleet.Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Catalog{}, err
	}
	defer f.Close()
	return fleet.LoadCatalog(f)
}

// CheckCloudInit runs the real `cloud-init schema` over the user-data of every cloud-init-nocloud
// class, so that a class the node's cloud-init would refuse fails here (and at fleetd serve's
// start: the NixOS module puts cloud-init on the unit's path) rather than on the node's first
// boot, after its disk was erased. It returns one line per refusal, and notes for what it could
// not check (cloud-init not installed, user-data that is not #cloud-config), which are not
// problems of the files.
func CheckCloudInit(cat fleet.Catalog) (problems, notes []string) {
	for _, name := range cat.Names() {
		c, _ := cat.Class(name)
		if c.Kind != fleet.KindCloudInit || c.CloudInit == nil {
			continue
		}
		if !cloudinit.IsCloudConfig(c.CloudInit.UserData) {
			notes = append(notes, fmt.Sprintf("class %q's user-data is not #cloud-config; cloud-init schema checks only #cloud-config", name))
			continue
		}
		err := cloudinit.Schema(context.Background(), []byte(c.CloudInit.UserData))
		var refused *cloudinit.SchemaError
		switch {
		case errors.Is(err, cloudinit.ErrNotInstalled):
			notes = append(notes, fmt.Sprintf("cloud-init is not installed here, so class %q's user-data was NOT validated (install cloud-init, or run fleetd check where it is)", name))
		case errors.As(err, &refused):
			problems = append(problems, fmt.Sprintf("class %q: cloud_init.user_data is refused by cloud-init: %s", name, refused.Output))
		case err != nil:
			problems = append(problems, fmt.Sprintf("class %q: cloud_init.user_data could not be checked: %v", name, err))
		}
	}
	return problems, notes
}

// LoadBootPolicy reads and validates the boot policy file against the catalogue: strictly
// decoded, every digest well formed, every class it names a class of classes.json, and every
// installable class allowed at least one boot.
func LoadBootPolicy(path string, catalog fleet.Catalog) (*attest.BootPolicy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := attest.ParseBootPolicy(b)
	if err != nil {
		return nil, err
	}
	var unknown []string
	for _, name := range p.Classes() {
		if _, ok := catalog.Class(name); !ok {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("the boot policy has a list for %s, which classes.json does not have (known: %s)",
			strings.Join(unknown, ", "), strings.Join(catalog.Names(), ", "))
	}
	var none []string
	for _, name := range catalog.Names() {
		if c, _ := catalog.Class(name); c.Installable && p.Boots(name) == 0 {
			none = append(none, name)
		}
	}
	if len(none) > 0 {
		return nil, fmt.Errorf("the boot policy allows no boot for the installable classes %s: learn one for the fleet or for each", strings.Join(none, ", "))
	}
	return p, nil
}

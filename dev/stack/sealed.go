package stack

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/netbox"
)

// AddedDevice is a device AddSealedDevices or AddDeclaredDevices added: in NetBox only, with no
// machine behind it.
type AddedDevice struct {
	Name    string
	ID      int64
	Address string // its primary IPv4 (an address of the machines' /8)
	MACs    []string
}

// sealedFirst is the address index (address) of the first sealed device: past any machine's.
const sealedFirst = 1 << 16

// AddSealedDevices adds n devices to NetBox as fleetd leaves a node it installed and has checked
// since, without installing them: the steady state of a large fleet (`make load`'s steady mode,
// docs/performance.md). Each is active, with every field fleetd owns copied from template (a
// device of this stack fleetd installed, so the values are fleetd's own and as large as a real
// node's: its identity's two certificate chains, its facts, its boot baseline) and made its own:
// a request id and Workflow name of its own, certificate serials of its own, its name in the
// identity, its MAC and disk in the facts, and a last boot check at now; and sealed with the
// stack's seal key (netbox.seal_keys) as fleetd seals its writes. It has four interfaces (eth0
// and eth1 with a MAC each, eth2 with none, a management-only bmc with one) and an address of
// its own in the machines' /8. The devices share template's EK and SMBIOS UUID (nothing in
// fleetd compares devices with each other), and none has a machine: none can run a boot check.
// Names are prefix-00001, prefix-00002, …
func (s *Stack) AddSealedDevices(template string, n int, prefix string, now time.Time) ([]AddedDevice, error) {
	id := s.DeviceID(template)
	if id == 0 {
		return nil, fmt.Errorf("add sealed devices: no device %q in the stack", template)
	}
	cf, err := s.emu.CustomFieldData(id)
	if err != nil {
		return nil, err
	}
	tpl, err := netbox.FieldsOf(cf)
	if err != nil {
		return nil, fmt.Errorf("add sealed devices: read %s's fields: %w", template, err)
	}
	if tpl.Owned.State != fleet.StateActive || tpl.Owned.Identity.Empty() || tpl.Owned.LDevIDSerial == "" {
		return nil, fmt.Errorf("add sealed devices: %s is %q with no identity or certificates: install it first (its fields are the copies' template)",
			template, tpl.Owned.State)
	}
	secret, err := os.ReadFile(s.paths.sealKey)
	if err != nil {
		return nil, fmt.Errorf("add sealed devices: the stack's seal key: %w", err)
	}
	keys, err := fleet.NewSealKeys(fleet.SealKey{ID: SealKeyID, Secret: bytes.TrimSpace(secret)})
	if err != nil {
		return nil, fmt.Errorf("add sealed devices: %w", err)
	}
	return s.addNumbered(n, prefix, func(name string, k int, addr netip.Prefix) (int64, []string, error) {
		macs := []string{sealedMAC(k, 0), sealedMAC(k, 1), sealedMAC(k, 3)}
		fields, err := sealedFields(cf, tpl.Owned, name, macs[0], sealedDisk(k), now)
		if err != nil {
			return 0, nil, fmt.Errorf("add sealed device %s: %w", name, err)
		}
		id, err := s.emu.AddDevice(netboxemu.DeviceSpec{Name: name, Status: "active", Serial: sealedSerial(k),
			DeviceType: "fleetsim-machine", PrimaryIPv4: addr.String(),
			Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: macs[:1]}, {Name: "eth1", MACs: macs[1:2]}, {Name: "eth2"},
				{Name: "bmc", MgmtOnly: true, MACs: macs[2:]}},
			FieldsFor: func(id int64) (map[string]any, error) { return seal(keys, id, fields, now) }})
		return id, macs, err
	})
}

// addNumbered adds n devices named prefix-00001, prefix-00002, … with add, which is given each
// one's name, its number k among every device added this way (its MACs and serials derive from
// it) and its address, and returns its NetBox id and MACs.
func (s *Stack) addNumbered(n int, prefix string, add func(name string, k int, addr netip.Prefix) (int64, []string, error)) ([]AddedDevice, error) {
	s.sealedMu.Lock()
	defer s.sealedMu.Unlock()
	out := make([]AddedDevice, 0, n)
	for j := range n {
		name := fmt.Sprintf("%s-%05d", prefix, j+1)
		addr := address(sealedFirst + s.sealed)
		id, macs, err := add(name, s.sealed, addr)
		if err != nil {
			return nil, err
		}
		s.sealed++
		out = append(out, AddedDevice{Name: name, ID: id, Address: addr.String(), MACs: macs})
	}
	return out, nil
}

// sealedSerial and sealedDisk are the chassis and disk serials of added device k.
func sealedSerial(k int) string { return fmt.Sprintf("FSEAL-%06d", k) }
func sealedDisk(k int) string   { return fmt.Sprintf("FSEAL%06dDISK", k) }

// sealedMAC is MAC nic of sealed device k: 02:f6:NN:KK:KK:KK.
func sealedMAC(k, nic int) string {
	return fmt.Sprintf("02:f6:%02x:%02x:%02x:%02x", nic, k>>16&0xff, k>>8&0xff, k&0xff)
}

// sealedFields is template's custom fields cf (whose fields fleetd owns read as owned) made the
// device name's: its own request, Workflow, serials, identity name, boot MAC, disk and last boot
// check; the seal is added by seal once the device has its id.
func sealedFields(cf map[string]any, owned fleet.Owned, name, bootMAC, disk string, now time.Time) (map[string]any, error) {
	out := make(map[string]any, len(cf))
	for k, v := range cf {
		out[k] = v
	}
	req, err := fleet.NewRequestID(fleet.RequestAction(owned.Request), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial := func() (string, error) {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return fmt.Sprintf("%x", b), nil
	}
	if out[netbox.CFLDevIDSerial], err = serial(); err != nil {
		return nil, err
	}
	if out[netbox.CFLAKSerial], err = serial(); err != nil {
		return nil, err
	}
	out[netbox.CFRequest] = req
	out[netbox.CFWorkflow] = fleet.WorkflowName(name, req)
	out[netbox.CFLastBootCheck] = now.UTC().Format(time.RFC3339Nano)
	out["disk_serial"] = disk
	id := owned.Identity
	id.Name, id.Request = name, req
	facts := owned.Facts
	facts.Claimed.MAC = bootMAC
	facts.Claimed.Disks = append(facts.Claimed.Disks[:0:0], facts.Claimed.Disks...)
	for i := range facts.Claimed.Disks {
		if facts.Claimed.Disks[i].Serial == cf["disk_serial"] {
			facts.Claimed.Disks[i].Serial = disk
		}
	}
	for key, v := range map[string]any{netbox.CFIdentity: id, netbox.CFFacts: facts} {
		if out[key], err = jsonObject(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seal adds fleet_seal to fields for device id, sealed over what fleetd reads back of them.
func seal(keys *fleet.SealKeys, id int64, fields map[string]any, now time.Time) (map[string]any, error) {
	d, err := netbox.FieldsOf(fields)
	if err != nil {
		return nil, err
	}
	if d.Owned.FactsUnreadable != "" {
		return nil, errors.New("its facts do not read back: " + d.Owned.FactsUnreadable)
	}
	out := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		out[k] = v
	}
	out[netbox.CFSeal] = keys.Seal(id, d.Owned, now)
	return out, nil
}

// jsonObject is v as NetBox stores a JSON custom field: decoded JSON.
func jsonObject(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// AddDeclaredDevices adds n talos-worker devices as the owner declares them and no machine stands
// behind: status planned, a disk serial, an EK hash of no TPM, one interface with a MAC and an
// address of its own in the machines' /8. A provision of one is decided and its Workflow created
// as any (the load test's storms); nothing netboots. Names are prefix-00001, prefix-00002, …
func (s *Stack) AddDeclaredDevices(n int, prefix string) ([]AddedDevice, error) {
	return s.addNumbered(n, prefix, func(name string, k int, addr netip.Prefix) (int64, []string, error) {
		ek := make([]byte, 32)
		if _, err := rand.Read(ek); err != nil {
			return 0, nil, err
		}
		macs := []string{sealedMAC(k, 0)}
		id, err := s.emu.AddDevice(netboxemu.DeviceSpec{Name: name, Serial: sealedSerial(k), DeviceType: "fleetsim-machine",
			PrimaryIPv4: addr.String(), Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: macs}},
			CustomFields: map[string]any{"fleet_class": "talos-worker", "disk_serial": sealedDisk(k), "ek_sha256": fmt.Sprintf("%x", ek)}})
		return id, macs, err
	})
}

// Package fleettest holds in-memory stand-ins for the fleet service's ports, for tests of the
// domain and of the adapters that call it. They keep the semantics the domain relies on (NetBox's
// per-key custom-field merge, an ETag version per write and 412 on a stale If-Match; Kubernetes's
// AlreadyExists-is-success for Workflows). The real adapters are tested against the NetBox
// emulator and a real Kubernetes API server in their own packages.
package fleettest

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// Inventory is an in-memory fleet.Inventory.
type Inventory struct {
	mu       sync.Mutex
	devices  map[int64]fleet.Device
	versions map[int64]int
	journal  map[int64][]string
	// Calls counts every call of the fleet.Inventory methods (a benchmark reports the NetBox
	// requests a decision costs with it).
	Calls atomic.Int64
	// ReadLatency is how long each device read takes, in nanoseconds (0: none): NetBox's
	// latency, for a test of what waits on it.
	ReadLatency atomic.Int64
	// ConflictOnce makes the next conditional update of a device fail with ErrConflict after
	// applying someone else's change to it (a concurrent writer).
	ConflictOnce map[int64]func(*fleet.Device)
	failUpdate   func(id int64, p fleet.Patch) (applied bool, err error)
}

// FailUpdates sets (nil: clears) what is asked before each update: a non-nil error is returned
// for it, after the update is applied when applied is true (NetBox wrote it and its answer was
// lost) or without applying it (a 5xx).
func (m *Inventory) FailUpdates(f func(id int64, p fleet.Patch) (applied bool, err error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failUpdate = f
}

// NewInventory holds the given devices.
func NewInventory(ds ...fleet.Device) *Inventory {
	m := &Inventory{devices: map[int64]fleet.Device{}, versions: map[int64]int{}, journal: map[int64][]string{},
		ConflictOnce: map[int64]func(*fleet.Device){}}
	for _, d := range ds {
		m.devices[d.ID] = d
		m.versions[d.ID] = 1
	}
	return m
}

// read waits ReadLatency, as a NetBox read would.
func (m *Inventory) read() {
	if d := m.ReadLatency.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
}

func (m *Inventory) get(id int64) (fleet.Device, error) {
	d, ok := m.devices[id]
	if !ok {
		return fleet.Device{}, fmt.Errorf("device %d: %w", id, fleet.ErrNotFound)
	}
	d.Version = strconv.Itoa(m.versions[id])
	return d, nil
}

// Device implements fleet.Inventory.
func (m *Inventory) Device(_ context.Context, id int64) (fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get(id)
}

// DeviceFields implements fleet.Inventory.
func (m *Inventory) DeviceFields(_ context.Context, id int64) (fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.get(id)
	d.MACs = nil
	return d, err
}

// DeviceByName implements fleet.Inventory.
func (m *Inventory) DeviceByName(_ context.Context, name string) (fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, d := range m.devices {
		if d.Name == name {
			return m.get(id)
		}
	}
	return fleet.Device{}, fmt.Errorf("device %q: %w", name, fleet.ErrNotFound)
}

// Devices implements fleet.Inventory. Like NetBox's list, it carries no versions.
func (m *Inventory) Devices(context.Context) ([]fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []fleet.Device
	for id := range m.devices {
		d, _ := m.get(id)
		d.Version = ""
		out = append(out, d)
	}
	return out, nil
}

// Update implements fleet.Inventory.
func (m *Inventory) Update(_ context.Context, id int64, p fleet.Patch) (fleet.Device, error) {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.get(id)
	if err != nil {
		return fleet.Device{}, err
	}
	if f := m.ConflictOnce[id]; f != nil && p.IfVersion != "" {
		delete(m.ConflictOnce, id)
		f(&d)
		m.devices[id] = d
		m.versions[id]++
		return fleet.Device{}, fmt.Errorf("PATCH device %d: 412: %w", id, fleet.ErrConflict)
	}
	if p.IfVersion != "" && p.IfVersion != d.Version {
		return fleet.Device{}, fmt.Errorf("PATCH device %d: 412: %w", id, fleet.ErrConflict)
	}
	var fail error
	if m.failUpdate != nil {
		var applied bool
		if applied, fail = m.failUpdate(id, p); fail != nil && !applied {
			return fleet.Device{}, fail
		}
	}
	Apply(&d, p)
	m.devices[id] = d
	m.versions[id]++
	if fail != nil {
		return fleet.Device{}, fail
	}
	d, err = m.get(id)
	d.MACs = nil // as the NetBox adapter: Update does not read the MACs again
	return d, err
}

// Apply applies a patch to a device the way NetBox merges it.
func Apply(d *fleet.Device, p fleet.Patch) {
	if p.ClearDesiredAction {
		d.Declared.DesiredAction = fleet.ActionNone
	}
	if p.Status != "" {
		d.Status = p.Status
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.State != nil {
		d.Owned.State = *p.State
	}
	set(&d.Owned.Message, p.Message)
	set(&d.Owned.Request, p.Request)
	set(&d.Owned.Workflow, p.Workflow)
	set(&d.Owned.LDevIDSerial, p.LDevIDSerial)
	set(&d.Owned.LAKSerial, p.LAKSerial)
	set(&d.Owned.LDevIDSerialPrevious, p.LDevIDSerialPrevious)
	set(&d.Owned.LAKSerialPrevious, p.LAKSerialPrevious)
	set(&d.Owned.BootBaseline, p.BootBaseline)
	if p.LastBootCheck != nil {
		d.Owned.LastBootCheck = *p.LastBootCheck
	}
	if p.BootCheck != nil {
		d.Owned.BootCheck = *p.BootCheck
	}
	if p.Identity != nil {
		d.Owned.Identity = *p.Identity
	}
	if p.Facts != nil {
		d.Owned.Facts, d.Owned.FactsUnreadable = *p.Facts, ""
	}
}

// Journal implements fleet.Inventory.
func (m *Inventory) Journal(_ context.Context, id int64, kind fleet.JournalKind, text string) error {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.journal[id] = append(m.journal[id], string(kind)+": "+text)
	return nil
}

// Get returns the device as stored.
func (m *Inventory) Get(id int64) fleet.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _ := m.get(id)
	return d
}

// Set replaces a device (an owner's edit that fires no webhook).
func (m *Inventory) Set(d fleet.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices[d.ID] = d
	m.versions[d.ID]++
}

// JournalOf returns the device's journal entries, each "<kind>: <text>".
func (m *Inventory) JournalOf(id int64) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.journal[id]...)
}

// Installer records Workflows by name, as the Kubernetes API would.
type Installer struct {
	mu        sync.Mutex
	workflows map[string]fleet.WorkflowStatus
	specs     map[string]fleet.WorkflowSpec
	creates   int
	// Fail, when set, is returned by Install (API down, or a wrapped fleet.ErrTemplate).
	Fail error
}

// NewInstaller is an empty installer.
func NewInstaller() *Installer {
	return &Installer{workflows: map[string]fleet.WorkflowStatus{}, specs: map[string]fleet.WorkflowSpec{}}
}

// Install implements fleet.Installer.
func (m *Installer) Install(_ context.Context, w fleet.WorkflowSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.Fail != nil {
		return m.Fail
	}
	if _, ok := m.workflows[w.Name]; ok {
		return nil
	}
	m.creates++
	m.specs[w.Name] = w
	m.workflows[w.Name] = fleet.WorkflowStatus{Name: w.Name, Phase: fleet.WorkflowWaiting}
	return nil
}

// Workflow implements fleet.Installer.
func (m *Installer) Workflow(_ context.Context, name string) (fleet.WorkflowStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws, ok := m.workflows[name]
	if !ok {
		return fleet.WorkflowStatus{}, fmt.Errorf("workflow %s: %w", name, fleet.ErrNotFound)
	}
	return ws, nil
}

// Set sets a Workflow's status, as Tinkerbell would.
func (m *Installer) Set(name string, ws fleet.WorkflowStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws.Name = name
	m.workflows[name] = ws
}

// Creates is how many Workflows were created.
func (m *Installer) Creates() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.creates
}

// Spec is what a Workflow was created from.
func (m *Installer) Spec(name string) fleet.WorkflowSpec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.specs[name]
}

// Clock is a clock the test moves.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now implements fleet.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Catalog has an installable talos class with every Template, and worker-g2.
func Catalog() fleet.Catalog {
	tpl := map[fleet.Action]string{fleet.ActionProvision: "talos-install", fleet.ActionAttest: "fleet-attest",
		fleet.ActionWipe: "fleet-wipe", fleet.ActionRetire: "fleet-retire"}
	return fleet.NewCatalog(
		fleet.Class{Name: "talos-worker", Kind: fleet.KindTalos, Installable: true, Templates: tpl, Image: "http://img/talos.raw.zst",
			SecureBoot: fleet.SecureBootAny, Timeout: time.Hour, Talos: &fleet.TalosClass{MachineType: "worker"}},
		fleet.Class{Name: "worker-g2", Kind: fleet.KindTalos, Installable: false, Reason: "G2 boards have no TPM 2.0"},
	)
}

// EKHash is a well-formed ek_sha256 entry.
const EKHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// Declared is a validly declared planned device of class talos-worker.
func Declared(id int64, name string) fleet.Device {
	return fleet.Device{ID: id, Name: name, Status: fleet.StatusPlanned, MACs: []fleet.MAC{"3c:ec:ef:4c:4f:54"},
		Address:  netip.MustParsePrefix("10.0.0.5/24"),
		Declared: fleet.Declaration{Class: "talos-worker", DiskSerial: "S4EWNX0R123456", EKHashes: []string{EKHash}}}
}

// Attested gives a provision's device the identity material its attestation records: issued at
// issued for ttl, for the device's current request and the SMBIOS UUID uuid, with stand-in
// certificate and blob bytes (the renderers copy them; nothing parses them).
func Attested(d fleet.Device, uuid string, issued time.Time, ttl time.Duration) fleet.Device {
	d.Owned.Identity = fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: d.Owned.Request, Issued: issued,
		Expires: issued.Add(ttl), UUIDSHA256: fleet.UUIDHash(uuid), SMBIOSSerial: "SYS123",
		LAK:    fleet.LAKMaterial{Chain: [][]byte{[]byte("lak leaf"), []byte("lak ca")}, Blob: []byte(`{"KeyEncoding":1}`)},
		LDevID: fleet.LDevIDMaterial{Chain: [][]byte{[]byte("ldevid leaf")}}}
	return d
}

// PreviewInstall implements fleet.InstallPreviewer: Fail, as Install would return it, and
// nothing created.
func (m *Installer) PreviewInstall(_ context.Context, _ fleet.WorkflowSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Fail
}

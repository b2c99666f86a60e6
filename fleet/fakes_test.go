package fleet

import (
	"context"
	"fmt"
	"math/rand"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// memInventory is an in-memory Inventory with NetBox's write semantics that matter to the domain:
// per-key merge of custom fields, a version that changes on every write (ETag), 412 on a stale
// If-Match, and a journal. Tests of the real adapter against the NetBox emulator live in netbox/.
type memInventory struct {
	mu       sync.Mutex
	devices  map[int64]Device
	versions map[int64]int
	journal  map[int64][]string
	// conflictOnce makes the next conditional update of a device fail with ErrConflict after
	// applying someone else's change (simulating a concurrent writer).
	conflictOnce map[int64]func(*Device)
	failUpdates  error
}

func newMemInventory(ds ...Device) *memInventory {
	m := &memInventory{devices: map[int64]Device{}, versions: map[int64]int{}, journal: map[int64][]string{},
		conflictOnce: map[int64]func(*Device){}}
	for _, d := range ds {
		m.devices[d.ID] = d
		m.versions[d.ID] = 1
	}
	return m
}

func (m *memInventory) get(id int64) (Device, error) {
	d, ok := m.devices[id]
	if !ok {
		return Device{}, fmt.Errorf("device %d: %w", id, ErrNotFound)
	}
	d.Version = strconv.Itoa(m.versions[id])
	return d, nil
}

func (m *memInventory) Device(_ context.Context, id int64) (Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get(id)
}

func (m *memInventory) DeviceByName(_ context.Context, name string) (Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, d := range m.devices {
		if d.Name == name {
			return m.get(id)
		}
	}
	return Device{}, fmt.Errorf("device %q: %w", name, ErrNotFound)
}

func (m *memInventory) Devices(context.Context) ([]Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Device
	for id := range m.devices {
		d, _ := m.get(id)
		d.Version = "" // list responses carry no ETag
		out = append(out, d)
	}
	return out, nil
}

func (m *memInventory) Update(_ context.Context, id int64, p Patch) (Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failUpdates != nil {
		return Device{}, m.failUpdates
	}
	d, err := m.get(id)
	if err != nil {
		return Device{}, err
	}
	if f := m.conflictOnce[id]; f != nil && p.IfVersion != "" {
		delete(m.conflictOnce, id)
		f(&d)
		m.devices[id] = d
		m.versions[id]++
		return Device{}, fmt.Errorf("PATCH device %d: 412: %w", id, ErrConflict)
	}
	if p.IfVersion != "" && p.IfVersion != d.Version {
		return Device{}, fmt.Errorf("PATCH device %d: 412: %w", id, ErrConflict)
	}
	applyPatch(&d, p)
	m.devices[id] = d
	m.versions[id]++
	return m.get(id)
}

func applyPatch(d *Device, p Patch) {
	if p.ClearDesiredAction {
		d.Declared.DesiredAction = ActionNone
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
	set(&d.Owned.BootBaseline, p.BootBaseline)
	if p.LastBootCheck != nil {
		d.Owned.LastBootCheck = *p.LastBootCheck
	}
	if p.BootCheck != nil {
		d.Owned.BootCheck = *p.BootCheck
	}
}

func (m *memInventory) Journal(_ context.Context, id int64, kind JournalKind, text string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.journal[id] = append(m.journal[id], string(kind)+": "+text)
	return nil
}

func (m *memInventory) dev(id int64) Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _ := m.get(id)
	return d
}

// memInstaller records Workflows by name, as the Kubernetes API would (AlreadyExists is success).
type memInstaller struct {
	mu        sync.Mutex
	workflows map[string]WorkflowStatus
	specs     map[string]WorkflowSpec
	creates   int
	fail      error
}

func newMemInstaller() *memInstaller {
	return &memInstaller{workflows: map[string]WorkflowStatus{}, specs: map[string]WorkflowSpec{}}
}

func (m *memInstaller) Install(_ context.Context, w WorkflowSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if _, ok := m.workflows[w.Name]; ok {
		return nil
	}
	m.creates++
	m.specs[w.Name] = w
	m.workflows[w.Name] = WorkflowStatus{Name: w.Name, Phase: WorkflowWaiting}
	return nil
}

func (m *memInstaller) Workflow(_ context.Context, name string) (WorkflowStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws, ok := m.workflows[name]
	if !ok {
		return WorkflowStatus{}, fmt.Errorf("workflow %s: %w", name, ErrNotFound)
	}
	return ws, nil
}

func (m *memInstaller) set(name string, ws WorkflowStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws.Name = name
	m.workflows[name] = ws
}

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func testCatalog() Catalog {
	tpl := map[Action]string{ActionProvision: "talos-install", ActionAttest: "fleet-attest",
		ActionWipe: "fleet-wipe", ActionRetire: "fleet-retire"}
	return NewCatalog(
		Class{Name: "talos-worker", Kind: KindTalos, Installable: true, Templates: tpl, Image: "http://img/talos.raw.zst",
			SecureBoot: SecureBootAny, Timeout: time.Hour, Talos: &TalosClass{MachineType: "worker"}},
		Class{Name: "worker-g2", Kind: KindTalos, Installable: false, Reason: "G2 boards have no TPM 2.0"},
	)
}

const ekHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func declared(id int64, name string) Device {
	return Device{ID: id, Name: name, Status: StatusPlanned, MACs: []MAC{"3c:ec:ef:4c:4f:54"},
		Address:  netip.MustParsePrefix("10.0.0.5/24"),
		Declared: Declaration{Class: "talos-worker", DiskSerial: "S4EWNX0R123456", EKHashes: []string{ekHash}}}
}

func newTestService(inv Inventory, inst Installer) *Service {
	clock := &fixedClock{time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	pending, err := NewPending(PendingConfig{Clock: clock, TTL: time.Hour})
	if err != nil {
		panic(err)
	}
	s, err := NewService(Config{FleetdURL: "http://spore:8080"}, Deps{Inventory: inv, Installer: inst,
		Catalog: testCatalog(), Clock: clock, Pending: pending,
		Random: rand.New(rand.NewSource(1))})
	if err != nil {
		panic(err)
	}
	return s
}

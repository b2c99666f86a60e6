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
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// ServiceUser is the NetBox user the in-memory NetBox records fleetd's writes (Update) under, and the
// one the tests' services are configured with (fleet.Config.ServiceUser).
const ServiceUser = "fleetd"

// Owner is the NetBox user the in-memory NetBox records the owner's edits under.
const Owner = "owner"

// SealKeys is the seal key ring of the tests' fleetd (one key, "test"): the in-memory NetBox seals the
// devices it is given with it, as fleetd would have written them.
func SealKeys() *fleet.SealKeys {
	k, err := fleet.NewSealKeys(SealKey())
	if err != nil {
		panic(err) // a fixed, valid key
	}
	return k
}

// SealKey is SealKeys' one key.
func SealKey() fleet.SealKey {
	return fleet.SealKey{ID: "test", Secret: []byte("fleettest seal key: 32 bytes or more, never a secret")}
}

// NetBox is an in-memory fleet.NetBox. It keeps NetBox's change log of each device as
// NetBox does (every save, by whom, before and after), so that the service's trust check reads
// it: Update is fleetd's save (ServiceUser), WriteAs another user's.
type NetBox struct {
	mu       sync.Mutex
	devices  map[int64]fleet.Device
	versions map[int64]int
	journal  map[int64][]string
	history  map[int64][]fleet.DeviceChange // oldest first
	last     time.Time                      // the time of the last save
	// Clock, when set, stamps the saves (last_updated, the change log); otherwise the wall clock.
	Clock fleet.Clock
	// HistoryErr, when set, is returned by DeviceHistory (NetBox's change log unreadable).
	HistoryErr error
	// Calls counts every call of the fleet.NetBox methods (a benchmark reports the NetBox
	// requests a decision costs with it).
	Calls atomic.Int64
	// ReadLatency is how long each device read takes, in nanoseconds (0: none): NetBox's
	// latency, for a test of what waits on it.
	ReadLatency atomic.Int64
	// ConflictOnce makes the next conditional update of a device fail with ErrConflict after
	// applying someone else's change to it (a concurrent writer): another fleetd instance's
	// (sealed, ServiceUser's save) when it changes a field fleetd owns, else the owner's; or, when
	// ConflictBy names a user for the device, that user's save exactly as the change leaves it.
	ConflictOnce map[int64]func(*fleet.Device)
	ConflictBy   map[int64]string
	failUpdate   func(id int64, p fleet.Patch) (applied bool, err error)
}

// FailUpdates sets (nil: clears) what is asked before each update: a non-nil error is returned
// for it, after the update is applied when applied is true (NetBox wrote it and its answer was
// lost) or without applying it (a 5xx).
func (m *NetBox) FailUpdates(f func(id int64, p fleet.Patch) (applied bool, err error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failUpdate = f
}

// NewNetBox holds the given devices as fleetd wrote them: sealed with SealKeys (a device given
// with a Seal keeps it), with nothing in their change log (as NetBox seeded without a request, or
// saved longer ago than it keeps its log).
func NewNetBox(ds ...fleet.Device) *NetBox {
	m := &NetBox{devices: map[int64]fleet.Device{}, versions: map[int64]int{}, journal: map[int64][]string{},
		history: map[int64][]fleet.DeviceChange{}, ConflictOnce: map[int64]func(*fleet.Device){}, ConflictBy: map[int64]string{}}
	keys := SealKeys()
	for _, d := range ds {
		if d.Seal == "" {
			d.Seal = keys.Seal(d.ID, d.Owned, time.Unix(0, 0))
		}
		m.devices[d.ID] = d
		m.versions[d.ID] = 1
	}
	return m
}

// read waits ReadLatency, as a NetBox read would.
func (m *NetBox) read() {
	if d := m.ReadLatency.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
}

// now is the time of a save: the clock's, and always after the last save's.
func (m *NetBox) now() time.Time {
	t := time.Now()
	if m.Clock != nil {
		t = m.Clock.Now()
	}
	if !t.After(m.last) {
		t = m.last.Add(time.Microsecond)
	}
	m.last = t
	return t
}

// save stores a device's new state as user saved it, and records the save in its change log
// (NetBox records no save that changed nothing).
func (m *NetBox) save(user string, before, after fleet.Device) {
	at := m.now()
	after.LastUpdated = at
	m.devices[after.ID] = after
	m.versions[after.ID]++
	if sameSaved(before, after) {
		return
	}
	m.history[after.ID] = append(m.history[after.ID], fleet.DeviceChange{DeviceID: after.ID, User: user, Time: at,
		Before: snapshot(before), After: snapshot(after)})
}

// snapshot is what a change log entry keeps of a device: its custom fields and status.
func snapshot(d fleet.Device) fleet.Device {
	return fleet.Device{ID: d.ID, Status: d.Status, Declared: d.Declared, Owned: d.Owned, Seal: d.Seal}
}

// sameSaved reports whether a save changed nothing of the device. NetBox writes a change log entry
// when the object's serialized data differs before and after the save (netbox/core/signals.py,
// objectchange.has_changes), so a save of the serial or the name is an entry too, though the
// entry kept here holds only the snapshot's fields; a save that changes nothing still moves
// last_updated and writes no entry.
func sameSaved(a, b fleet.Device) bool {
	a.LastUpdated, b.LastUpdated = time.Time{}, time.Time{}
	a.Version, b.Version = "", ""
	return reflect.DeepEqual(a, b)
}

func (m *NetBox) get(id int64) (fleet.Device, error) {
	d, ok := m.devices[id]
	if !ok {
		return fleet.Device{}, fmt.Errorf("device %d: %w", id, fleet.ErrNotFound)
	}
	d.Version = strconv.Itoa(m.versions[id])
	return d, nil
}

// Device implements fleet.NetBox.
func (m *NetBox) Device(_ context.Context, id int64) (fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get(id)
}

// DeviceFields implements fleet.NetBox.
func (m *NetBox) DeviceFields(_ context.Context, id int64) (fleet.Device, error) {
	m.Calls.Add(1)
	m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.get(id)
	d.MACs = nil
	return d, err
}

// DeviceByName implements fleet.NetBox.
func (m *NetBox) DeviceByName(_ context.Context, name string) (fleet.Device, error) {
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

// Devices implements fleet.NetBox. Like NetBox's list, it carries no versions.
func (m *NetBox) Devices(context.Context) ([]fleet.Device, error) {
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

// Update implements fleet.NetBox.
func (m *NetBox) Update(_ context.Context, id int64, p fleet.Patch) (fleet.Device, error) {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.get(id)
	if err != nil {
		return fleet.Device{}, err
	}
	if f := m.ConflictOnce[id]; f != nil && p.IfVersion != "" {
		delete(m.ConflictOnce, id)
		before := d
		f(&d)
		user := Owner
		switch by, ok := m.ConflictBy[id]; {
		case ok:
			user = by
		case !reflect.DeepEqual(before.Owned, d.Owned): // another fleetd instance's write
			user, d.Seal = ServiceUser, SealKeys().Seal(id, d.Owned, m.now())
		}
		m.save(user, before, d)
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
	before := d
	Apply(&d, p)
	m.save(ServiceUser, before, d)
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
	p.ApplyOwned(&d.Owned)
	if p.Seal != "" {
		d.Seal = p.Seal
	}
}

// Journal implements fleet.NetBox.
func (m *NetBox) Journal(_ context.Context, id int64, kind fleet.JournalKind, text string) error {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.journal[id] = append(m.journal[id], string(kind)+": "+text)
	return nil
}

// Get returns the device as stored.
func (m *NetBox) Get(id int64) fleet.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _ := m.get(id)
	return d
}

// Set replaces a device as fleetd would have written it (sealed with SealKeys, recorded as
// ServiceUser's save).
func (m *NetBox) Set(d fleet.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.Seal = SealKeys().Seal(d.ID, d.Owned, m.now())
	m.save(ServiceUser, m.devices[d.ID], d)
}

// WriteAs saves the device as user: edit changes it as that user's client would (any field,
// fleet_seal included: a user who may edit devices can write any of them), and the change log
// records the save under user.
func (m *NetBox) WriteAs(user string, id int64, edit func(d *fleet.Device)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.devices[id]
	before := d
	edit(&d)
	m.save(user, before, d)
}

// Changes is the device's change log, oldest first.
func (m *NetBox) Changes(id int64) []fleet.DeviceChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fleet.DeviceChange(nil), m.history[id]...)
}

// TrimHistory drops every change log entry older than before (NetBox's housekeeping of
// CHANGELOG_RETENTION).
func (m *NetBox) TrimHistory(before time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, h := range m.history {
		m.history[id] = slices.DeleteFunc(h, func(ch fleet.DeviceChange) bool { return ch.Time.Before(before) })
	}
}

// DeviceID implements fleet.NetBox.
func (m *NetBox) DeviceID(_ context.Context, name string) (int64, error) {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, d := range m.devices {
		if d.Name == name {
			return id, nil
		}
	}
	return 0, fmt.Errorf("device %q: %w", name, fleet.ErrNotFound)
}

// DeviceHistory implements fleet.NetBox: the device's saves newest first, up to the first
// until reports.
func (m *NetBox) DeviceHistory(_ context.Context, id int64, until func(fleet.DeviceChange) bool) ([]fleet.DeviceChange, error) {
	m.Calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.HistoryErr != nil {
		return nil, m.HistoryErr
	}
	var out []fleet.DeviceChange
	h := m.history[id]
	for i := len(h) - 1; i >= 0; i-- {
		out = append(out, h[i])
		if until(h[i]) {
			break
		}
	}
	return out, nil
}

// DeviceChanges implements fleet.ChangeLog over the in-memory NetBox's change log: the saves of every
// device (or q.DeviceID's) since q.Since by anyone but q.ExceptUser, oldest first.
func (m *NetBox) DeviceChanges(_ context.Context, q fleet.ChangeQuery) ([]fleet.DeviceChange, error) {
	m.mu.Lock()
	var all []fleet.DeviceChange
	for id, h := range m.history {
		if q.DeviceID == 0 || q.DeviceID == id {
			all = append(all, h...)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(all, func(a, b fleet.DeviceChange) int { return a.Time.Compare(b.Time) })
	var out []fleet.DeviceChange
	for _, ch := range all {
		if ch.Time.Before(q.Since) || q.ExceptUser != "" && ch.User == q.ExceptUser || q.Keep != nil && !q.Keep(ch) {
			continue
		}
		out = append(out, ch)
	}
	return out, nil
}

// MACChanges implements fleet.ChangeLog: the in-memory NetBox records no MAC address saves.
func (m *NetBox) MACChanges(context.Context, fleet.ChangeQuery) ([]fleet.MACChange, error) {
	return nil, nil
}

// JournalOf returns the device's journal entries, each "<kind>: <text>".
func (m *NetBox) JournalOf(id int64) []string {
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
		// talos-member's nodes join the workload cluster: delivered, they are joining until their
		// Node is Ready (docs/design.md §1, "Joining the cluster").
		fleet.Class{Name: "talos-member", Kind: fleet.KindTalos, Installable: true, Templates: tpl, Image: "http://img/talos.raw.zst",
			SecureBoot: fleet.SecureBootAny, Timeout: time.Hour, Talos: &fleet.TalosClass{MachineType: "worker"}, JoinsKubernetes: true},
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
// issued for ttl, for the device's current request and name and the SMBIOS UUID uuid, with stand-in
// certificate and blob bytes (the renderers copy them; nothing parses them).
func Attested(d fleet.Device, uuid string, issued time.Time, ttl time.Duration) fleet.Device {
	d.Owned.Identity = fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: d.Owned.Request, Name: d.Name, Issued: issued,
		Expires: issued.Add(ttl), UUIDSHA256: fleet.UUIDHash(uuid), SMBIOSSerial: "SYS123",
		LAK:    fleet.LAKMaterial{Chain: [][]byte{[]byte("lak leaf"), []byte("lak ca")}, Blob: []byte(`{"KeyEncoding":1}`)},
		LDevID: fleet.LDevIDMaterial{Chain: [][]byte{[]byte("ldevid leaf")}}, BootstrapTokenKey: SealKey().ID}
	return d
}

// PreviewInstall implements fleet.InstallPreviewer: Fail, as Install would return it, and
// nothing created.
func (m *Installer) PreviewInstall(_ context.Context, _ fleet.WorkflowSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Fail
}

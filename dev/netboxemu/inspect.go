package netboxemu

import (
	"fmt"
	"time"
)

// Inspection: what tests and the development stack read back without going through the API.

// DeviceJSON returns a device as the API's detail view renders it (URLs relative to the API).
func (e *Emulator) DeviceJSON(id int64) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.db.devices[int(id)]
	if !ok {
		return nil, fmt.Errorf("read device %d from the NetBox emulator: no such device", id)
	}
	return encodeREST(e.renderDevice(rc{}, d, true)), nil
}

// CustomFieldData returns a copy of a device's stored custom_field_data (only the keys ever
// assigned; values as decoded JSON).
func (e *Emulator) CustomFieldData(id int64) (map[string]any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.db.devices[int(id)]
	if !ok {
		return nil, fmt.Errorf("read device %d from the NetBox emulator: no such device", id)
	}
	out := make(map[string]any, len(d.cf))
	for k, v := range d.cf {
		out[k] = v
	}
	return out, nil
}

// JournalEntry is a journal entry as stored.
type JournalEntry struct {
	ID        int64
	DeviceID  int64
	Kind      string
	Comments  string
	CreatedBy string // username
	Created   time.Time
}

// Journal returns a device's journal entries, oldest first.
func (e *Emulator) Journal(deviceID int64) []JournalEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []JournalEntry
	for _, id := range sortedIDs(e.db.journal, func(a, b *journalEntry) bool { return a.created.Before(b.created) }) {
		j := e.db.journal[id]
		if j.objType != "dcim.device" || j.objID != int(deviceID) {
			continue
		}
		by := ""
		if u, ok := e.db.users[j.createdBy]; ok {
			by = u.username
		}
		out = append(out, JournalEntry{ID: int64(j.id), DeviceID: deviceID, Kind: j.kind,
			Comments: j.comments, CreatedBy: by, Created: j.created})
	}
	return out
}

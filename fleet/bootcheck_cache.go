package fleet

import "sync"

// What the hourly boot check keeps between a node's checks (docs/design.md §5): the last boot
// each node's checks replayed (attest.BootCache) and the NetBox id of each device name a check
// found (nameIndex), so that a repeated check of the same boot costs its quote signatures, the
// hash of its log, one device read and the conditional write that records it. Both are caches:
// a miss costs the full replay or the lookup by name, never a wrong answer.

// bootCacheSize bounds both caches, in devices: a fleet of 10,000 nodes and its renamed or
// replaced devices fit, at about 150 bytes a boot (its digests: attest.BootCache keeps no
// baseline text but a drifted one's) and 100 a name, some 4 MB full. A larger fleet's checks
// still pass, at the cost of a replay (about 1 ms of CPU) or a lookup by name for the devices
// that did not fit.
const bootCacheSize = 16384

// nameIndex is a bounded map of device names to NetBox ids. Only names from verified LAK
// certificates that NetBox found go in.
type nameIndex struct {
	mu  sync.Mutex
	max int
	ids map[string]int64
}

func newNameIndex(max int) *nameIndex { return &nameIndex{max: max, ids: map[string]int64{}} }

func (x *nameIndex) get(name string) (int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, ok := x.ids[name]
	return id, ok
}

// put records a name's id, forgetting an arbitrary other name when the index is full.
func (x *nameIndex) put(name string, id int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.ids[name]; !ok && len(x.ids) >= x.max {
		for other := range x.ids {
			delete(x.ids, other)
			break
		}
	}
	x.ids[name] = id
}

func (x *nameIndex) forget(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.ids, name)
}

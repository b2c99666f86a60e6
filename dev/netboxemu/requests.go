package netboxemu

import (
	"maps"
	"sync"
)

// requestCounts counts the API requests the emulator served, by the route that answered them
// (the ServeMux pattern, e.g. "GET /api/dcim/devices/{id}/"), so a benchmark can tell what a
// client's work costs NetBox endpoint by endpoint. Requests that fail (a fault, a refused token)
// count too: NetBox spent a request on them.
type requestCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *requestCounts) add(route string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[route]++
}

// RequestCounts is how many API requests the emulator served since it started, by route: the
// method and the path pattern, ids as {id} ("GET /api/dcim/devices/{id}/"). Two snapshots'
// difference is what the work between them cost.
func (e *Emulator) RequestCounts() map[string]int64 {
	e.requests.mu.Lock()
	defer e.requests.mu.Unlock()
	return maps.Clone(e.requests.n)
}

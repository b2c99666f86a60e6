package api

import "time"

// Inventory is the body of GET /v1/inventory and GET /v1/devices/{name}/inventory (docs/http.md
// "Check the inventory"): each fleet device's NetBox declaration against what fleetd last learned
// of the machine, written nowhere. `fleetd inventory check` prints it.
type Inventory struct {
	CheckedAt time.Time `json:"checked_at"`
	// BootCheckWindow is how old an active node's last accepted boot check may be before its
	// boot checks count as stopped (inventory.boot_check_window), as a Go duration.
	BootCheckWindow string            `json:"boot_check_window"`
	Differences     int               `json:"differences"` // how many differences the devices hold in all
	Devices         []InventoryDevice `json:"devices"`
}

// InventoryDevice is one device's check: result agrees, differs, stale (facts older than the
// declaration were not compared) or no-facts (fleetd has learned nothing of the machine yet).
type InventoryDevice struct {
	Device      string                `json:"device"`
	Class       string                `json:"class"`
	Result      string                `json:"result"`
	DeclaredAt  *time.Time            `json:"declared_at,omitempty"` // the declaration's last change after the facts, when there was one
	Differences []InventoryDifference `json:"differences,omitempty"`
	Stale       []InventoryStale      `json:"stale,omitempty"`
}

// InventoryDifference is one difference: its kind (fleetd_inventory_differences' label), one
// sentence, and when and where the evidence was recorded.
type InventoryDifference struct {
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
	Source string    `json:"source"`
}

// InventoryStale is a half of the facts (proved or claimed) that was not compared: it was last
// seen before the declaration changed.
type InventoryStale struct {
	Facts      string    `json:"facts"`
	Seen       time.Time `json:"seen"`
	DeclaredAt time.Time `json:"declared_at"`
	By         string    `json:"by,omitempty"`
}

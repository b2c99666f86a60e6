// Package agent is the machine side of fleetd: `fleetd enroll`, the first action of a Workflow in
// HookOS (SPEC §1 step 3, §4), and later `fleetd boot-check`.
package agent

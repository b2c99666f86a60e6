package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/folly-infra/fleetd/pki"
)

// DeviceView is what fleetd knows about a device for operators (docs/design.md §6 GET /v1/devices).
type DeviceView struct {
	Device
	Workflow      *WorkflowStatus // the current request's Workflow, when it could be read
	WorkflowError string          // why it could not be read
	PendingConfig bool            // a configuration waits for its one fetch (fleet_identity, in time)
	// Queued is a request the owner made while the current one runs (desired_action, or the
	// status decommissioning): it starts when the current one ends. ActionNone for none.
	Queued Action
	// BootCheckMissing: the device is an active node whose last accepted boot check (or, before
	// the first, whose activation) is older than the configured limit (docs/design.md §5).
	BootCheckMissing bool
	// Joining is the step a joining device waits for (JoinWait); "" when it is not joining.
	Joining string
	// LDevID and LAK are the current certificates' expiry and renewal point (fleet_identity);
	// zero when fleetd has no copy of them.
	LDevID, LAK CertTimes
}

// Views is the operator's read-only view of the fleet: each device as NetBox has it, with its
// Workflow's progress and what fleetd derives from its fields. It writes nothing, except what
// every read may (a device whose fields another user wrote is put back first, trust.go).
type Views struct {
	core         *core
	inst         Installer
	issuer       *pki.Issuer   // when each certificate is due for renewal; nil: not shown
	missingAfter time.Duration // how old an active node's last boot check may be (Config.BootCheckMissingAfter)
}

// View reads one device by name and the progress of its current Workflow.
func (s *Views) View(ctx context.Context, name string) (DeviceView, error) {
	d, err := s.core.netbox.DeviceByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return DeviceView{}, Refuse(RefusedNotFound, "unknown_device", "NetBox has no device named %q", name)
	}
	if err != nil {
		return DeviceView{}, fmt.Errorf("read device %q: %w: %w", name, ErrNetBoxUnavailable, err)
	}
	return s.view(ctx, d, true, nil), nil
}

// ViewAll lists every device. Workflows are read only for devices with a running request, and
// through one listing of fleetd's Workflows (as the reconcile does), so a large fleet costs one
// NetBox listing and a few Kubernetes Lists; a Workflow the listing misses is read on its own.
func (s *Views) ViewAll(ctx context.Context) ([]DeviceView, error) {
	devices, err := s.core.netbox.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("list devices: %w: %w", ErrNetBoxUnavailable, err)
	}
	listed := listWorkflows(ctx, s.inst, s.core.log, devices)
	views := make([]DeviceView, len(devices))
	for i, d := range devices {
		views[i] = s.view(ctx, d, !d.Owned.State.Terminal(), listed)
	}
	return views, nil
}

func (s *Views) view(ctx context.Context, d Device, readWorkflow bool, listed workflowListing) DeviceView {
	v := DeviceView{Device: d, PendingConfig: delivery(d, s.core.clock.Now()) == deliveryOpen, BootCheckMissing: s.bootCheckMissing(d), Joining: JoinWait(d)}
	v.LDevID, v.LAK = certTimes(s.issuer, d)
	if !d.Owned.State.Terminal() {
		v.Queued = requested(d)
	}
	if !readWorkflow || d.Owned.Workflow == "" {
		return v
	}
	ws, err := listed.workflow(ctx, s.inst, d.Owned.Workflow)
	if err != nil {
		v.WorkflowError = err.Error()
		return v
	}
	v.Workflow = &ws
	return v
}

// bootCheckMissing reports an active node whose boot checks stopped: the last accepted one is
// older than the limit. A node that never sent one is reported by the alert on
// fleetd_device_boot_check_status{outcome="none"} (fleetd keeps no activation time).
func (s *Views) bootCheckMissing(d Device) bool {
	if !d.Owned.State.Running() || d.Status == StatusDecommissioning || d.Owned.LastBootCheck.IsZero() {
		return false
	}
	return s.core.clock.Now().Sub(d.Owned.LastBootCheck) > s.missingAfter
}

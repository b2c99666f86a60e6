package workflows

import (
	"context"
	"fmt"
	"strconv"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"

	"github.com/folly-infra/fleetd/fleet"
)

// readHardware returns the device's Hardware, or nil when there is none.
func (in *Installer) readHardware(ctx context.Context, name string) (*tinkv1.Hardware, error) {
	hw := &tinkv1.Hardware{}
	err := in.observe("get_hardware", in.k.getTyped(ctx, hardwareResource, name, hw))
	switch {
	case objectNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read Hardware %s: %w", name, err)
	}
	return hw, nil
}

// desiredHardware is the device's Hardware as fleetd wants it (docs/design.md §3), built on the existing
// object so that fields fleetd does not own (bmcRef, disks, metadata, userData, and the DHCP
// and netboot settings it does not set) are kept.
//
// fleetd owns: the LabelDeviceID label and spec.interfaces, which becomes exactly one interface
// for the primary MAC (lowercase, as the CRD requires) with the device name as hostname, the
// NetBox address and netmask, and netboot.allowWorkflow true. netboot.allowPXE is false on a new
// Hardware when the Workflow toggles it (tink-controller turns it on while the Workflow runs and
// off after a success), and true when nothing would; on an existing Hardware whose Workflow
// toggles it, the current value is kept, because tink-controller owns it while a Workflow runs.
func desiredHardware(existing *tinkv1.Hardware, w fleet.WorkflowSpec, ns string, boot tinkv1.BootOptions) *tinkv1.Hardware {
	hw := &tinkv1.Hardware{}
	hw.Name, hw.Namespace = w.Device.Name, ns
	if existing != nil {
		hw = existing.DeepCopy()
	}
	if hw.Labels == nil {
		hw.Labels = map[string]string{}
	}
	hw.Labels[LabelDeviceID] = strconv.FormatInt(w.Device.ID, 10)

	mac := string(w.Device.PrimaryMAC())
	iface := tinkv1.Interface{}
	if existing != nil {
		for _, i := range existing.Spec.Interfaces {
			if i.DHCP != nil && i.DHCP.MAC == mac {
				iface = *i.DeepCopy()
			}
		}
	}
	toggled := boot.ToggleAllowNetboot || boot.BootMode != ""
	allowPXE := !toggled
	if iface.Netboot != nil && iface.Netboot.AllowPXE != nil && toggled {
		allowPXE = *iface.Netboot.AllowPXE
	}
	if iface.DHCP == nil {
		iface.DHCP = &tinkv1.DHCP{}
	}
	iface.DHCP.MAC, iface.DHCP.Hostname = mac, w.Device.Name
	if w.Device.Address.IsValid() && w.Device.Address.Addr().Is4() {
		if iface.DHCP.IP == nil {
			iface.DHCP.IP = &tinkv1.IP{}
		}
		iface.DHCP.IP.Address = w.Device.Address.Addr().String()
		iface.DHCP.IP.Netmask = netmask(w.Device.Address.Bits())
		iface.DHCP.IP.Family = 4
	}
	if iface.Netboot == nil {
		iface.Netboot = &tinkv1.Netboot{}
	}
	allowWorkflow := true
	iface.Netboot.AllowPXE, iface.Netboot.AllowWorkflow = &allowPXE, &allowWorkflow
	hw.Spec.Interfaces = []tinkv1.Interface{iface}
	return hw
}

// applyHardware creates or updates the device's Hardware from existing (what Install read) and
// want (desiredHardware of it), re-reading and recomputing both on a write conflict
// (tink-controller or a concurrent Install changed it). It writes nothing when the Hardware is
// already as desired.
func (in *Installer) applyHardware(ctx context.Context, w fleet.WorkflowSpec, boot tinkv1.BootOptions, existing, want *tinkv1.Hardware) error {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if existing, err = in.readHardware(ctx, w.Device.Name); err != nil {
				return err
			}
			want = desiredHardware(existing, w, in.ns, boot)
		}
		first = false
		if existing == nil {
			err := in.observe("create_hardware", in.k.create(ctx, hardwareResource, "Hardware", want))
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(tinkv1.GroupVersion.WithResource("hardware").GroupResource(), want.Name, err)
			}
			return err
		}
		if equality.Semantic.DeepEqual(existing.Spec, want.Spec) && equality.Semantic.DeepEqual(existing.Labels, want.Labels) {
			return nil
		}
		return in.observe("update_hardware", in.k.update(ctx, hardwareResource, "Hardware", want))
	})
	switch {
	case apierrors.IsInvalid(err):
		return refuse("", "the API server rejected Hardware %s: %v", w.Device.Name, err)
	case err != nil:
		return fmt.Errorf("write Hardware %s: %w", w.Device.Name, err)
	}
	return nil
}

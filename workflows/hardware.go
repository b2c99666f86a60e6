package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/folly-infra/fleetd/fleet"
)

// hardware is a device's Hardware as fleetd reads it: the object as the API server has it, with
// every field of whichever Tinkerbell version's CRD (Object), and the fields fleetd reads through
// tink v0.12.2's Go types (Typed: bmcRef, interfaces, disks...). fleetd never writes Typed back:
// a field its Go types do not know would be dropped (v0.25's spec.agentID, spec.references, an
// interface's dhcp.domain_name or isoboot...).
type hardware struct {
	Object *unstructured.Unstructured
	Typed  *tinkv1.Hardware
}

// readHardware returns the device's Hardware, or nil when there is none.
func (in *Installer) readHardware(ctx context.Context, name string) (*hardware, error) {
	u, err := in.k.get(ctx, hardwareResource, name)
	err = in.observe("get_hardware", err)
	switch {
	case objectNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read Hardware %s: %w", name, err)
	}
	typed := &tinkv1.Hardware{}
	if err := fromUnstructured(u, typed); err != nil {
		return nil, fmt.Errorf("read Hardware %s: %w", name, err)
	}
	return &hardware{Object: u, Typed: typed}, nil
}

// hardwareChange is what fleetd owns of a device's Hardware (docs/design.md §3), as it wants it:
// the LabelDeviceID label and spec.interfaces, which becomes exactly one interface for the
// primary MAC (lowercase, as the CRD requires) with the device name as hostname, the NetBox
// address and netmask, and netboot.allowWorkflow true. netboot.allowPXE is false on a new
// Hardware when the Workflow toggles it (the controller turns it on while the Workflow runs and
// off after a success), and true when nothing would; on an existing Hardware whose Workflow
// toggles it, the current value is kept, because the controller owns it while a Workflow runs.
//
// The interface is built on the existing one of the MAC as JSON, so that its fields fleetd does
// not own (uefi, gateway, ipxe, and those of any Tinkerbell version) are kept; everything else of
// the Hardware (bmcRef, disks, metadata, userData, other labels, and fields fleetd's Go types do
// not know) is never written.
type hardwareChange struct {
	Name      string
	DeviceID  string
	Interface map[string]any
}

func desiredHardware(existing *hardware, w fleet.WorkflowSpec, boot tinkv1.BootOptions) hardwareChange {
	mac := string(w.Device.PrimaryMAC())
	iface := map[string]any{}
	if existing != nil {
		ifaces, _, _ := unstructured.NestedSlice(existing.Object.Object, "spec", "interfaces")
		for _, i := range ifaces {
			m, ok := i.(map[string]any)
			if got, _, _ := unstructured.NestedString(m, "dhcp", "mac"); ok && got == mac {
				iface = runtime.DeepCopyJSON(m)
			}
		}
	}
	toggled := boot.ToggleAllowNetboot || boot.BootMode != ""
	allowPXE := !toggled
	if cur, found, err := unstructured.NestedBool(iface, "netboot", "allowPXE"); found && err == nil && toggled {
		allowPXE = cur
	}
	set := func(v any, path ...string) { _ = unstructured.SetNestedField(iface, v, path...) }
	set(mac, "dhcp", "mac")
	set(w.Device.Name, "dhcp", "hostname")
	if w.Device.Address.IsValid() && w.Device.Address.Addr().Is4() {
		set(w.Device.Address.Addr().String(), "dhcp", "ip", "address")
		set(netmask(w.Device.Address.Bits()), "dhcp", "ip", "netmask")
		set(int64(4), "dhcp", "ip", "family")
	}
	set(allowPXE, "netboot", "allowPXE")
	set(true, "netboot", "allowWorkflow")
	return hardwareChange{Name: w.Device.Name, DeviceID: strconv.FormatInt(w.Device.ID, 10), Interface: iface}
}

// applied is the Hardware with the change made (a new one when existing is nil), as the API
// server will hold it: what the Template is rendered with.
func (c hardwareChange) applied(existing *hardware, ns string) *unstructured.Unstructured {
	var u *unstructured.Unstructured
	if existing != nil {
		u = existing.Object.DeepCopy()
	} else {
		u = &unstructured.Unstructured{Object: map[string]any{}}
		u.SetGroupVersionKind(tinkv1.GroupVersion.WithKind("Hardware"))
		u.SetName(c.Name)
		u.SetNamespace(ns)
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelDeviceID] = c.DeviceID
	u.SetLabels(labels)
	_ = unstructured.SetNestedSlice(u.Object, []any{runtime.DeepCopyJSON(c.Interface)}, "spec", "interfaces")
	return u
}

// unchanged says whether existing already is as the change wants it.
func (c hardwareChange) unchanged(existing *hardware) bool {
	want := c.applied(existing, existing.Object.GetNamespace())
	wantIfaces, _, _ := unstructured.NestedSlice(want.Object, "spec", "interfaces")
	gotIfaces, _, _ := unstructured.NestedSlice(existing.Object.Object, "spec", "interfaces")
	return existing.Object.GetLabels()[LabelDeviceID] == c.DeviceID && equality.Semantic.DeepEqual(wantIfaces, gotIfaces)
}

// patch is the change as a JSON merge patch of fleetd's own fields, conditional on the
// resourceVersion existing was read at (a newer one on the server is a conflict).
func (c hardwareChange) patch(existing *hardware) ([]byte, error) {
	p := map[string]any{
		"metadata": map[string]any{
			"labels":          map[string]any{LabelDeviceID: c.DeviceID},
			"resourceVersion": existing.Object.GetResourceVersion(),
		},
		"spec": map[string]any{"interfaces": []any{c.Interface}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode the patch of Hardware %s: %w", c.Name, err)
	}
	return b, nil
}

// applyHardware creates the device's Hardware from want, or patches fleetd's own fields of
// existing (what Install read) to want (desiredHardware of it), re-reading and recomputing both
// on a write conflict (the controller or a concurrent Install changed it). It writes nothing when
// the Hardware is already as desired.
func (in *Installer) applyHardware(ctx context.Context, w fleet.WorkflowSpec, boot tinkv1.BootOptions, existing *hardware, want hardwareChange) error {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if existing, err = in.readHardware(ctx, w.Device.Name); err != nil {
				return err
			}
			want = desiredHardware(existing, w, boot)
		}
		first = false
		if existing == nil {
			_, err := in.k.resource(hardwareResource).Create(ctx, want.applied(nil, in.ns), createOptions)
			err = in.observe("create_hardware", err)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(hardwareResource.GroupResource(), want.Name, err)
			}
			return err
		}
		if want.unchanged(existing) {
			return nil
		}
		p, err := want.patch(existing)
		if err != nil {
			return err
		}
		return in.observe("patch_hardware", in.k.mergePatch(ctx, hardwareResource, want.Name, p))
	})
	switch {
	case apierrors.IsInvalid(err):
		return refuse("", "the API server rejected Hardware %s: %v", w.Device.Name, err)
	case err != nil:
		return fmt.Errorf("write Hardware %s: %w", w.Device.Name, err)
	}
	return nil
}

package workflows

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/folly-infra/fleetd/fleet"
)

// Install makes the device's Hardware current and creates the request's Workflow (docs/design.md §3).
//
// It is idempotent: when the Workflow w.Name exists, Install returns nil, having brought the
// Hardware to what the request needs (which is what it already is, unless NetBox changed) and
// created nothing; concurrent calls for one request create one Workflow (the API server's
// AlreadyExists decides).
// Before writing anything it reads the class's Template, renders it with this Workflow's
// hardwareMap and applies CheckTemplate; a Template or device that cannot carry the request
// yields a *RefusedError (wrapping fleet.ErrTemplate). Any other error means the API server could
// not be reached or answered unexpectedly: retry later.
func (in *Installer) Install(ctx context.Context, w fleet.WorkflowSpec) error {
	log := in.log.With().Str("device", w.Device.Name).Str("class", w.Class.Name).
		Str("action", string(w.Action)).Str("step", "install").Str("workflow", w.Name).Logger()
	// 1. Build what will be written and check it without side effects. No read of the Workflow
	// comes first: fleet installs a request it just claimed or whose Workflow it just read
	// missing, so the read would cost every new Workflow a request to learn what the create's
	// AlreadyExists says anyway (docs/performance.md).
	p, err := in.prepare(ctx, w)
	if errors.Is(err, fleet.ErrTemplate) {
		// A request installed before is not refused for what its Template became since.
		if exists, rerr := in.workflowExists(ctx, w.Name); rerr != nil || exists {
			if exists {
				log.Info().Str("outcome", "exists").Msg("Workflow already exists")
			}
			return rerr
		}
		log.Warn().Str("outcome", "refused").Err(err).Msg("request refused")
	}
	if err != nil {
		return err
	}
	// 2. Write the Hardware, then create the Workflow (AlreadyExists is success).
	if err := in.applyHardware(ctx, w, p.boot, p.existing, p.hw); err != nil {
		return err
	}
	created, err := in.createWorkflow(ctx, w, p.hm, p.boot)
	if err != nil {
		return err
	}
	outcome := "created"
	if !created {
		outcome = "exists"
	}
	ev := log.Info().Str("outcome", outcome).Str("template", w.Template).Bool("created", created)
	if p.note != "" {
		ev = ev.Str("note", p.note)
	}
	ev.Msg("Workflow installed")
	return nil
}

// PreviewInstall checks the request's Workflow as Install would before it writes anything, and
// writes nothing (`fleetd plan`, fleet.InstallPreviewer): the names, the Hardware's boot options
// and the class's Template rendered with this Workflow's hardwareMap. A *RefusedError (wrapping
// fleet.ErrTemplate) is what Install would refuse the request with; any other error means the
// API server could not be read.
func (in *Installer) PreviewInstall(ctx context.Context, w fleet.WorkflowSpec) error {
	_, err := in.prepare(ctx, w)
	return err
}

// prepared is what Install writes, built and checked.
type prepared struct {
	existing *hardware // nil: none yet
	hw       hardwareChange
	boot     tinkv1.BootOptions
	note     string
	hm       map[string]string
}

// prepare builds the Hardware and the hardwareMap of the request's Workflow and checks them and
// the Template, reading only.
func (in *Installer) prepare(ctx context.Context, w fleet.WorkflowSpec) (prepared, error) {
	var p prepared
	if err := validNames(w); err != nil {
		return p, err
	}
	// The Hardware and the Template are read at once: neither read needs the other, so a new
	// Workflow waits for the slower of the two, not for both in turn (docs/performance.md). The
	// refusals keep their order: the Hardware's, then the boot options', then the Template's.
	var (
		tpl    *tinkv1.Template
		tplErr error
		read   sync.WaitGroup
	)
	read.Go(func() { tpl, tplErr = in.readTemplate(ctx, w.Template) })
	var err error
	p.existing, err = in.readHardware(ctx, w.Device.Name)
	read.Wait()
	if err != nil {
		return p, err
	}
	if p.boot, p.note, err = bootOptions(w, p.existing); err != nil {
		return p, err
	}
	if tplErr != nil {
		return p, tplErr
	}
	p.hw = desiredHardware(p.existing, w, p.boot)
	p.hm = HardwareMap(w)
	return p, checkTemplate(in.version, tpl, w, p.hm, p.hw.applied(p.existing, in.ns).Object)
}

// HardwareMap is the hardwareMap of the request's Workflow: every Map* key, always present (a
// Template that names a missing key fails to render).
func HardwareMap(w fleet.WorkflowSpec) map[string]string {
	timeout := w.Class.Timeout
	if timeout <= 0 {
		timeout = fleet.DefaultWorkflowTimeout
	}
	return map[string]string{
		MapMAC:           string(w.Device.PrimaryMAC()),
		MapDiskSerial:    w.Device.Declared.DiskSerial,
		MapFleetdURL:     w.FleetdURL,
		MapDeviceName:    w.Device.Name,
		MapDeviceID:      strconv.FormatInt(w.Device.ID, 10),
		MapRequest:       w.Request,
		MapAction:        string(w.Action),
		MapImageURL:      w.Class.Image,
		MapGlobalTimeout: strconv.FormatInt(int64(timeout/time.Second), 10),
	}
}

// validNames refuses a request whose objects Kubernetes would reject: names must be DNS
// subdomains, label values at most 63 characters, and Tinkerbell needs the MAC.
func validNames(w fleet.WorkflowSpec) error {
	for _, n := range []struct{ what, v string }{{"device name", w.Device.Name}, {"Workflow name", w.Name}} {
		if errs := validation.IsDNS1123Subdomain(n.v); len(errs) > 0 {
			return refuse("", "%s %q is not a valid Kubernetes object name (%s): rename the device in NetBox", n.what, n.v, errs[0])
		}
	}
	for _, v := range []string{w.Request, string(w.Action)} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return refuse("", "request %q cannot be a Kubernetes label value (%s)", v, errs[0])
		}
	}
	if w.Device.PrimaryMAC() == "" {
		return refuse("", "device %s has no MAC address in NetBox: Tinkerbell identifies the machine by it", w.Device.Name)
	}
	if w.Template == "" {
		return refuse("", "class %s names no Template for %s", w.Class.Name, w.Action)
	}
	return nil
}

// readTemplate reads the class's Template; one that does not exist refuses the request.
func (in *Installer) readTemplate(ctx context.Context, name string) (*tinkv1.Template, error) {
	tpl := &tinkv1.Template{}
	err := in.observe("get_template", in.k.getTyped(ctx, templateResource, name, tpl))
	switch {
	case objectNotFound(err):
		return nil, refuse(name, "it does not exist in namespace %s: apply it from the infrastructure repo", in.ns)
	case err != nil:
		return nil, fmt.Errorf("read Template %s: %w", name, err)
	}
	return tpl, nil
}

// checkTemplate renders the Template exactly as the controller of Tinkerbell version v will
// (with the Hardware hw as fleetd is about to write it), then applies fleetd's requirements.
func checkTemplate(v Version, tpl *tinkv1.Template, w fleet.WorkflowSpec, hm map[string]string, hw map[string]any) error {
	name := w.Template
	if tpl.Spec.Data == nil || *tpl.Spec.Data == "" {
		return refuse(name, "spec.data is empty")
	}
	r, err := RenderTemplate(v, *tpl.Spec.Data, hm, hw)
	if err != nil {
		return refuse(name, "it does not render as Tinkerbell %s would render it: %v", v, err)
	}
	if err := CheckTemplate(v, name, r, hm); err != nil {
		return err
	}
	return CheckFetchSecret(name, r, w.Action, w.Class.Kind)
}

// bootOptions derives the Workflow's bootOptions from the class (docs/design.md §3: netboot via BMC where
// the Hardware has one). A class asking for bootMode netboot on Hardware without spec.bmcRef
// falls back to toggleAllowNetboot (Tinkerbell's controller would otherwise fail NetbootJobSetup
// and leave the Workflow in PREPARING for ever); the machine must then be PXE-booted by hand or
// by its own boot order. bootMode iso has no such fallback and is refused without a BMC.
func bootOptions(w fleet.WorkflowSpec, existing *hardware) (tinkv1.BootOptions, string, error) {
	nb := w.Class.Netboot
	hasBMC := existing != nil && existing.Typed.Spec.BMCRef != nil
	switch nb.BootMode {
	case "":
		return tinkv1.BootOptions{ToggleAllowNetboot: nb.ToggleAllowNetboot}, "", nil
	case string(tinkv1.BootModeNetboot):
		if !hasBMC {
			return tinkv1.BootOptions{ToggleAllowNetboot: true},
				"class asks for bootMode netboot but the Hardware has no bmcRef: toggling allowPXE instead", nil
		}
		return tinkv1.BootOptions{BootMode: tinkv1.BootModeNetboot, ToggleAllowNetboot: nb.ToggleAllowNetboot}, "", nil
	case string(tinkv1.BootModeISO):
		if !hasBMC {
			return tinkv1.BootOptions{}, "", refuse("", "class %s boots by ISO, which needs a BMC, but Hardware %s has no spec.bmcRef: add the BMC or change the class's netboot.boot_mode", w.Class.Name, w.Device.Name)
		}
		return tinkv1.BootOptions{BootMode: tinkv1.BootModeISO, ISOURL: nb.ISOURL, ToggleAllowNetboot: nb.ToggleAllowNetboot}, "", nil
	}
	return tinkv1.BootOptions{}, "", refuse("", "class %s has unknown netboot.boot_mode %q", w.Class.Name, nb.BootMode)
}

// createWorkflow creates the Workflow; AlreadyExists (a concurrent Install won) is success and
// reports created false.
func (in *Installer) createWorkflow(ctx context.Context, w fleet.WorkflowSpec, hm map[string]string, boot tinkv1.BootOptions) (bool, error) {
	wf := &tinkv1.Workflow{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: in.ns, Labels: workflowLabels(w)},
		Spec: tinkv1.WorkflowSpec{TemplateRef: w.Template, HardwareRef: w.Device.Name,
			HardwareMap: hm, BootOptions: boot},
	}
	err := in.observe("create_workflow", in.k.create(ctx, workflowResource, "Workflow", wf))
	switch {
	case err == nil:
		in.metrics.created.Inc()
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case apierrors.IsInvalid(err):
		return false, refuse(w.Template, "the API server rejected Workflow %s: %v", w.Name, err)
	}
	return false, fmt.Errorf("create Workflow %s: %w", w.Name, err)
}

func workflowLabels(w fleet.WorkflowSpec) map[string]string {
	return map[string]string{
		LabelDeviceID: strconv.FormatInt(w.Device.ID, 10),
		LabelRequest:  w.Request,
		LabelAction:   string(w.Action),
	}
}

// netmask is the dotted IPv4 netmask of a prefix length.
func netmask(bits int) string {
	return net.IP(net.CIDRMask(bits, 32)).String()
}

// workflowExists reads whether the Workflow name exists.
func (in *Installer) workflowExists(ctx context.Context, name string) (bool, error) {
	_, err := in.k.get(ctx, workflowResource, name)
	switch err = in.observe("get_workflow", err); {
	case err == nil:
		return true, nil
	case objectNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("read Workflow %s: %w", name, err)
}

// Package tinkerbell does to a Workflow what Tinkerbell's tink-controller and tink-worker
// v0.12.2 would (tinkerbell-talos.md §1 lifecycle, §2), so that tests and the development stack
// (bin/fleetsim) can drive Workflows on an API server that runs no Tinkerbell.
//
// It is for tests and the development stack only; the production fleetd binary must not link
// it. Nothing here runs containers: the dev stack's simulated HookOS runs Actions(wf) itself and
// reports each one with ReportAction.
package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/workflows"
)

// Option changes how states are written.
type Option func(*options)

type options struct {
	newSpelling bool
}

// NewSpelling writes the states of the newer tinkerbell/tinkerbell (SUCCESS, RUNNING, ...)
// instead of tink v0.12.2's (STATE_SUCCESS, ...), so that fleetd's reading of both is exercised.
func NewSpelling() Option { return func(o *options) { o.newSpelling = true } }

func newOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// spell writes state s (either spelling accepted) in the chosen spelling.
func (o options) spell(s tinkv1.WorkflowState) tinkv1.WorkflowState {
	bare := strings.TrimPrefix(string(s), "STATE_")
	if o.newSpelling {
		return tinkv1.WorkflowState(bare)
	}
	return tinkv1.WorkflowState("STATE_" + bare)
}

// bare is a state without the STATE_ prefix, for comparisons.
func bare(s tinkv1.WorkflowState) string { return strings.TrimPrefix(string(s), "STATE_") }

// Render is tink-controller's first step on a new Workflow (state ""): render its Template with
// the hardwareMap and the Hardware (workflows.RenderTemplate, the same renderer fleetd checks
// with), write status.tasks with every action PENDING, and prepare booting:
//   - with toggleAllowNetboot or a bootMode, allowPXE is set on every Hardware interface;
//     bootMode netboot or iso on Hardware without spec.bmcRef sets NetbootJobSetupFailed and
//     leaves the Workflow PREPARING for ever, as tink-controller does; with a BMC the boot job is
//     taken as done (there is no BMC to drive);
//   - then the state becomes PENDING.
//
// A Template or Hardware that is missing, or a Template that does not render, sets
// templateRending failed with a TemplateRenderedSuccess=False condition, and Render returns an
// error saying why. A Workflow already rendered (state set) is left alone.
func Render(ctx context.Context, c client.Client, wf *tinkv1.Workflow, opts ...Option) error {
	o := newOptions(opts)
	if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
		return fmt.Errorf("read Workflow %s: %w", wf.Name, err)
	}
	if wf.Status.State != "" {
		return nil
	}
	hw, rendered, renderErr := renderFor(ctx, c, wf)
	now := metav1.NewTime(time.Now().UTC())
	if renderErr != nil {
		wf.Status.TemplateRendering = tinkv1.TemplateRenderingFailed
		wf.Status.SetCondition(tinkv1.WorkflowCondition{Type: tinkv1.TemplateRenderedSuccess, Status: metav1.ConditionFalse,
			Reason: "Error", Message: "error rendering template: " + renderErr.Error(), Time: &now})
		if err := c.Status().Update(ctx, wf); err != nil {
			return fmt.Errorf("write render failure of Workflow %s: %w", wf.Name, err)
		}
		return fmt.Errorf("render Workflow %s: %w", wf.Name, renderErr)
	}
	wf.Status.Tasks, wf.Status.GlobalTimeout = rendered.Tasks, rendered.GlobalTimeout
	for i := range wf.Status.Tasks {
		for j := range wf.Status.Tasks[i].Actions {
			wf.Status.Tasks[i].Actions[j].Status = o.spell(tinkv1.WorkflowStatePending)
		}
	}
	wf.Status.TemplateRendering = tinkv1.TemplateRenderingSuccessful
	wf.Status.SetCondition(tinkv1.WorkflowCondition{Type: tinkv1.TemplateRenderedSuccess, Status: metav1.ConditionTrue,
		Reason: "Complete", Message: "template rendered successfully", Time: &now})
	wf.Status.State = o.spell(tinkv1.WorkflowStatePending)
	if err := prepareBoot(ctx, c, wf, hw, o, now); err != nil {
		return err
	}
	if err := c.Status().Update(ctx, wf); err != nil {
		return fmt.Errorf("write rendered status of Workflow %s: %w", wf.Name, err)
	}
	return nil
}

// renderFor reads the Template and Hardware of wf and renders it. The error says what Tinkerbell
// would report.
func renderFor(ctx context.Context, c client.Client, wf *tinkv1.Workflow) (*tinkv1.Hardware, workflows.Rendered, error) {
	tpl := &tinkv1.Template{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: wf.Namespace, Name: wf.Spec.TemplateRef}, tpl); err != nil {
		return nil, workflows.Rendered{}, fmt.Errorf("read Template %s: %w", wf.Spec.TemplateRef, err)
	}
	var hw *tinkv1.Hardware
	if wf.Spec.HardwareRef != "" {
		hw = &tinkv1.Hardware{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: wf.Namespace, Name: wf.Spec.HardwareRef}, hw); err != nil {
			return nil, workflows.Rendered{}, fmt.Errorf("read Hardware %s: %w", wf.Spec.HardwareRef, err)
		}
	}
	data := ""
	if tpl.Spec.Data != nil {
		data = *tpl.Spec.Data
	}
	r, err := workflows.RenderTemplate(data, wf.Spec.HardwareMap, hw)
	return hw, r, err
}

// prepareBoot is tink-controller's PREPARING step, collapsed into the render.
func prepareBoot(ctx context.Context, c client.Client, wf *tinkv1.Workflow, hw *tinkv1.Hardware, o options, now metav1.Time) error {
	boot := wf.Spec.BootOptions
	if !boot.ToggleAllowNetboot && boot.BootMode == "" {
		return nil
	}
	if hw == nil {
		return errors.New("render: bootOptions need a hardwareRef")
	}
	if boot.BootMode != "" && hw.Spec.BMCRef == nil {
		wf.Status.State = o.spell(tinkv1.WorkflowStatePreparing)
		wf.Status.SetCondition(tinkv1.WorkflowCondition{Type: tinkv1.NetbootJobSetupFailed, Status: metav1.ConditionTrue,
			Reason: "Error", Message: fmt.Sprintf("hardware %q does not have a BMC", hw.Name), Time: &now})
		return nil
	}
	if err := setAllowPXE(ctx, c, hw, true); err != nil {
		return err
	}
	wf.Status.BootOptions.AllowNetboot.ToggledTrue = true
	wf.Status.SetCondition(tinkv1.WorkflowCondition{Type: tinkv1.ToggleAllowNetbootTrue, Status: metav1.ConditionTrue,
		Reason: "Complete", Message: "set allowPXE to true", Time: &now})
	if boot.BootMode != "" {
		wf.Status.SetCondition(tinkv1.WorkflowCondition{Type: tinkv1.NetbootJobComplete, Status: metav1.ConditionTrue,
			Reason: "Complete", Message: "simulated: no BMC is driven in the development stack", Time: &now})
	}
	return nil
}

// setAllowPXE writes netboot.allowPXE on every interface of the Hardware, as tink-controller does.
func setAllowPXE(ctx context.Context, c client.Client, hw *tinkv1.Hardware, allow bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &tinkv1.Hardware{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(hw), cur); err != nil {
			return fmt.Errorf("read Hardware %s: %w", hw.Name, err)
		}
		for i := range cur.Spec.Interfaces {
			if cur.Spec.Interfaces[i].Netboot == nil {
				cur.Spec.Interfaces[i].Netboot = &tinkv1.Netboot{}
			}
			v := allow
			cur.Spec.Interfaces[i].Netboot.AllowPXE = &v
		}
		err := c.Update(ctx, cur)
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("write allowPXE=%t on Hardware %s: %w", allow, hw.Name, err)
		}
		return err
	})
}

// sinceSeconds is the whole seconds from start to now (0 without a start).
func sinceSeconds(start *metav1.Time, now time.Time) int64 {
	if start == nil {
		return 0
	}
	return int64(now.Sub(start.Time) / time.Second)
}

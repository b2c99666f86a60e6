package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/folly-infra/fleetd/fleet"
)

// PruneAfter is how long after fleetd first saw a Workflow ended, its end recorded, PruneWorkflows
// deletes it: long after fleetd recorded its outcome (the Workflow watch records it within
// seconds, the periodic reconcile within its interval), so that every instance, one running
// behind too, has read it ended (docs/operate.md, "Tinkerbell").
const PruneAfter = time.Hour

// AnnotationEndedSeen is the time (RFC 3339, fleetd's clock) PruneWorkflows first saw a
// Workflow ended with its end recorded; the Workflow is deleted PruneAfter later.
const AnnotationEndedSeen = "fleetd.folly-infra/ended-seen"

// PruneWorkflows deletes the Workflows fleetd created (label LabelDeviceID) PruneAfter after it
// first saw them ended (succeeded, failed, timed out, or blocked for ever: Workflow's phases) with
// their end recorded: a pass that sees one so for the first time writes the time on it
// (AnnotationEndedSeen), and the first pass PruneAfter later deletes it. A Workflow named in keep
// (a request's whose end fleetd has not recorded yet: fleet.WorkflowPruner) is neither marked nor
// deleted, whatever its age. Each delete is conditional on the object read (its uid and
// resourceVersion), so a Workflow that changed since is left for the next pass. Tinkerbell
// v0.25's server lists every Workflow of an agent's id and refuses to serve the agent while an
// ended one comes first; v0.12.2's Workflows pile up for ever otherwise.
func (in *Installer) PruneWorkflows(ctx context.Context, keep map[string]bool) error {
	now := in.clock.Now()
	var errs []error
	cont := ""
	for {
		list, err := in.k.list(ctx, workflowResource, metav1.ListOptions{LabelSelector: fleetdCreated, Limit: listPage, Continue: cont})
		if err := in.observe("list_workflows", err); err != nil {
			return fmt.Errorf("list Workflows to prune in namespace %s: %w", in.ns, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			if keep[u.GetName()] {
				continue
			}
			ws, err := statusOf(u)
			if err != nil || !ws.Phase.Terminal() {
				continue
			}
			seen, err := time.Parse(time.RFC3339, u.GetAnnotations()[AnnotationEndedSeen])
			if err != nil { // first seen ended (or a value that is not fleetd's): now
				if err := in.markEnded(ctx, u.GetName(), now); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if now.Sub(seen) < PruneAfter {
				continue
			}
			deleted, err := in.deleteWorkflow(ctx, u)
			if err != nil {
				errs = append(errs, err)
			}
			if !deleted {
				continue
			}
			in.metrics.pruned.Inc()
			in.log.Info().Str("workflow", u.GetName()).Str("device_id", u.GetLabels()[LabelDeviceID]).
				Str("request", u.GetLabels()[LabelRequest]).Str("phase", string(ws.Phase)).Time("ended_seen", seen).
				Str("step", "prune").Str("outcome", "deleted").Msg("ended Workflow pruned")
		}
		if cont = list.GetContinue(); cont == "" {
			return errors.Join(errs...)
		}
	}
}

// markEnded writes AnnotationEndedSeen on the Workflow name (a merge patch of the annotation
// alone); one gone since is no error.
func (in *Installer) markEnded(ctx context.Context, name string, now time.Time) error {
	p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationEndedSeen, now.UTC().Format(time.RFC3339))
	err := in.observe("patch_workflow", in.k.mergePatch(ctx, workflowResource, name, []byte(p)))
	if err != nil && !objectNotFound(err) {
		return fmt.Errorf("mark ended Workflow %s: %w", name, err)
	}
	return nil
}

// deleteWorkflow deletes u unless it changed since it was read. A Workflow another writer deleted
// or changed first is not deleted, and no error.
func (in *Installer) deleteWorkflow(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	uid, rv := u.GetUID(), u.GetResourceVersion()
	err := in.k.resource(workflowResource).Delete(ctx, u.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	err = in.observe("delete_workflow", err)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("delete ended Workflow %s: %w", u.GetName(), err)
}

var _ fleet.WorkflowPruner = (*Installer)(nil)

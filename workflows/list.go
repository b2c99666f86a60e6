package workflows

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/fleet"
)

// listPage is how many Workflows one List request returns.
const listPage = 500

// fleetdCreated selects the Workflows fleetd created: those with the LabelDeviceID label (a
// label selector of the bare key).
const fleetdCreated = LabelDeviceID

// Workflows reads every Workflow fleetd created (label LabelDeviceID) in a few List requests —
// one per listPage Workflows — instead of one request per Workflow: the periodic reconcile over
// many running requests uses it (fleet.WorkflowLister). The map is keyed by Workflow name. An
// error means the API server could not be read; a Workflow whose status cannot be read is left
// out, so the caller reads it on its own.
func (in *Installer) Workflows(ctx context.Context) (map[string]fleet.WorkflowStatus, error) {
	out := map[string]fleet.WorkflowStatus{}
	cont := ""
	for {
		list, err := in.k.list(ctx, workflowResource, metav1.ListOptions{LabelSelector: fleetdCreated, Limit: listPage, Continue: cont})
		if err := in.observe("list_workflows", err); err != nil {
			return nil, fmt.Errorf("list Workflows in namespace %s: %w", in.ns, err)
		}
		for i := range list.Items {
			if ws, err := statusOf(&list.Items[i]); err == nil {
				out[list.Items[i].GetName()] = ws
			}
		}
		if cont = list.GetContinue(); cont == "" {
			return out, nil
		}
	}
}

var _ fleet.WorkflowLister = (*Installer)(nil)

package fleet

import (
	"context"

	"github.com/rs/zerolog"
)

// workflowListing is the Workflows as one listing read them at the start of a periodic
// reconcile (WorkflowLister), by name; nil when there is none.
type workflowListing map[string]WorkflowStatus

// listWorkflows reads every Workflow at once when the installer can and some device has a
// running request; otherwise, or when the listing fails, it returns nil and each Workflow is
// read on its own.
func listWorkflows(ctx context.Context, inst Installer, log zerolog.Logger, devices []Device) workflowListing {
	lister, ok := inst.(WorkflowLister)
	if !ok {
		return nil
	}
	running := false
	for _, d := range devices {
		running = running || !d.Owned.State.Terminal()
	}
	if !running {
		return nil
	}
	ws, err := lister.Workflows(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("list Workflows for the reconcile; reading each running request's Workflow instead")
		return nil
	}
	return ws
}

// workflow reads a Workflow's status: from the listing when it has the Workflow (a listing is a
// moment old: a Workflow that ended since is seen ended by the watch or the next reconcile),
// otherwise from the installer (a Workflow created after the listing is not missing).
func (listed workflowListing) workflow(ctx context.Context, inst Installer, name string) (WorkflowStatus, error) {
	if ws, ok := listed[name]; ok {
		return ws, nil
	}
	return inst.Workflow(ctx, name)
}

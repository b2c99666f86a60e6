package fleet

import "context"

// pruneWorkflows has the installer, when it can (WorkflowPruner), delete the ended Workflows
// whose end is recorded, keeping those of the requests that, as the pass listed the devices,
// still wait for their Workflow's end. A device the pass moved on since has a new request (a
// newer Workflow) or moved past its Workflow: neither frees a Workflow fleetd still reads. A
// failure is logged; the next pass tries again.
func (s *Requests) pruneWorkflows(ctx context.Context, devices []Device) {
	p, ok := s.inst.(WorkflowPruner)
	if !ok {
		return
	}
	keep := map[string]bool{}
	for _, d := range devices {
		if awaitsWorkflow(d.Owned.State) && d.Owned.Workflow != "" {
			keep[d.Owned.Workflow] = true
		}
	}
	if err := p.PruneWorkflows(ctx, keep); err != nil && ctx.Err() == nil {
		s.core.log.Warn().Err(err).Str("step", "prune").Msg("ended Workflows not pruned; the next reconcile tries again")
	}
}

// awaitsWorkflow says whether a request in state s has its Workflow's end still to record.
func awaitsWorkflow(s State) bool {
	switch s {
	case StatePending, StateInstalling, StateWiping:
		return true
	}
	return false
}

package workflows

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/folly-infra/fleetd/fleet"
)

// Watch backoff after the API server failed a list or a watch ended in error.
const (
	watchBackoffMin = 200 * time.Millisecond
	watchBackoffMax = 15 * time.Second
	// watchTimeout makes the server end each watch so that a silently dead connection is
	// replaced by a fresh list; the re-list reports only what changed.
	watchTimeout = 5 * time.Minute
)

// Watch calls fn for every status change of a Workflow that fleetd created (label
// LabelDeviceID), with the device id from that label, until ctx ends; it then returns nil.
//
// It lists, then watches from the list's resourceVersion. When the API server goes away or the
// watch expires, it lists again with backoff (200 ms doubling to 15 s) and calls fn only for
// Workflows whose fleetd view (phase, current action, failure) changed since it last called fn
// for them, so a restart of the API server neither loses nor repeats changes. The first list
// reports every existing Workflow once. fn runs on Watch's goroutine: a slow fn delays later
// events but loses none.
func (in *Installer) Watch(ctx context.Context, fn func(deviceID int64, wf fleet.WorkflowStatus)) error {
	seen := map[string]fleet.WorkflowStatus{}
	backoff := watchBackoffMin
	for ctx.Err() == nil {
		started := in.clock.Now()
		err := in.watchOnce(ctx, seen, fn)
		if ctx.Err() != nil {
			break
		}
		if in.clock.Now().Sub(started) > time.Minute {
			backoff = watchBackoffMin // it ran for a while: a fresh failure starts the backoff again
		}
		if err != nil {
			in.log.Warn().Err(err).Dur("retry_in", backoff).Str("step", "watch").Msg("Workflow watch interrupted")
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if err != nil {
			backoff = min(2*backoff, watchBackoffMax)
		}
	}
	return nil
}

// watchOnce lists and then watches until the watch ends. It returns nil when the server ended
// the watch normally.
func (in *Installer) watchOnce(ctx context.Context, seen map[string]fleet.WorkflowStatus, fn func(int64, fleet.WorkflowStatus)) error {
	list, err := in.k.list(ctx, workflowResource, metav1.ListOptions{LabelSelector: fleetdCreated})
	if err := in.observe("list_workflows", err); err != nil {
		return fmt.Errorf("list Workflows: %w", err)
	}
	present := map[string]bool{}
	for i := range list.Items {
		present[list.Items[i].GetName()] = true
		in.deliver(&list.Items[i], seen, fn)
	}
	for name := range seen {
		if !present[name] {
			delete(seen, name)
		}
	}
	timeout := int64(watchTimeout / time.Second)
	w, err := in.k.watch(ctx, workflowResource, metav1.ListOptions{LabelSelector: fleetdCreated,
		ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: &timeout})
	if err = in.observe("watch_workflows", err); err != nil {
		return fmt.Errorf("watch Workflows: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if err := in.handle(ev, seen, fn); err != nil {
				return err
			}
		}
	}
}

func (in *Installer) handle(ev watch.Event, seen map[string]fleet.WorkflowStatus, fn func(int64, fleet.WorkflowStatus)) error {
	switch ev.Type {
	case watch.Error:
		return fmt.Errorf("watch Workflows: the server ended the watch: %v", ev.Object)
	case watch.Bookmark:
		return nil
	}
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("watch Workflows: unexpected %T in a %s event", ev.Object, ev.Type)
	}
	if ev.Type == watch.Deleted {
		delete(seen, u.GetName())
		return nil
	}
	in.deliver(u, seen, fn)
	return nil
}

// deliver calls fn when the Workflow's view differs from the one last delivered.
func (in *Installer) deliver(u *unstructured.Unstructured, seen map[string]fleet.WorkflowStatus, fn func(int64, fleet.WorkflowStatus)) {
	id, err := strconv.ParseInt(u.GetLabels()[LabelDeviceID], 10, 64)
	if err != nil {
		in.log.Warn().Str("workflow", u.GetName()).Str("step", "watch").Msgf("label %s is not a device id; ignoring the Workflow", LabelDeviceID)
		return
	}
	ws, err := statusOf(u)
	if err != nil {
		in.log.Warn().Err(err).Str("workflow", u.GetName()).Str("step", "watch").Msg("unreadable Workflow status")
		return
	}
	if prev, ok := seen[u.GetName()]; ok && prev == ws {
		return
	}
	seen[u.GetName()] = ws
	fn(id, ws)
}

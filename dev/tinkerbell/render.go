// Package tinkerbell runs Tinkerbell v0.12.2's own programs against the development stack's API
// server: tink-controller (StartController: it renders Template + Hardware into each Workflow's
// status and moves its state), tink-server (StartServer, the workers' API) and a machine's
// tink-worker (StartWorker, whose containers dev/dockerapi runs), as the stack's Netboot does
// (tinkerbell-talos.md §1 lifecycle, §2). ReportAction reports actions as tink-server applies a
// worker's reports, for `fleetsim workflow` and the tests that choose an action's message or the
// newer Tinkerbell's state names, which the real worker and server do not write.
//
// It is for tests and the development stack only; the production fleetd binary must not link
// it.
package tinkerbell

import (
	"context"
	"fmt"
	"strings"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

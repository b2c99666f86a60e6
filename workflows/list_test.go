package workflows_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// TestWorkflowsListing: Workflows reads every Workflow fleetd created (label device-id), in both
// Tinkerbell spellings, across pages, as Workflow reads each one; a Workflow without fleetd's
// label is not fleetd's and is left out.
func TestWorkflowsListing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	want := map[string]fleet.WorkflowStatus{}
	states := []tinkv1.WorkflowState{"STATE_RUNNING", "SUCCESS", "STATE_FAILED", ""}
	const n = 523 // more than one page of 500
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("node-%03d-provision-aaaaaaaa", i)
		wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns,
			Labels: map[string]string{workflows.LabelDeviceID: fmt.Sprint(i + 1)}}, Spec: tinkv1.WorkflowSpec{TemplateRef: "x"}}
		if err := e.c.Create(ctx, wf); err != nil {
			t.Fatal(err)
		}
		if st := states[i%len(states)]; st != "" {
			wf.Status = tinkerbell.WorkflowStatus{State: st}
			if err := e.c.Status().Update(ctx, wf); err != nil {
				t.Fatal(err)
			}
		}
		one, err := e.in.Workflow(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = one
	}
	stray := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: e.ns}, Spec: tinkv1.WorkflowSpec{TemplateRef: "x"}}
	if err := e.c.Create(ctx, stray); err != nil {
		t.Fatal(err)
	}
	got, err := e.in.Workflows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Workflows() differs from reading each Workflow (-each +listed):\n%s", diff)
	}
	if lists := e.counter(t, "fleetd_kubernetes_requests_total", map[string]string{"op": "list_workflows", "outcome": "ok"}); lists != 2 {
		t.Errorf("%v list requests, want 2 (pages of 500)", lists)
	}
}

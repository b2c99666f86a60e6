package tinkerbell

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// TestOwnContainers: the machine's runner answers only its Workflow's containers, told by the
// /workflow bind tink-worker gives them, never another Workflow's container of the same name,
// which is ended only with the engine (the worker reports nothing for it) and named.
func TestOwnContainers(t *testing.T) {
	own := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: "tink", Name: "m1-r1"}}
	other := &tinkv1.Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: "tink", Name: "m1-r2"}}
	var ran []string
	g := newOwnContainers(own, func(_ context.Context, c dockerapi.Container) (string, int) {
		ran = append(ran, c.Name+" "+strings.Join(c.Binds, ","))
		return "ran\n", 0
	})
	container := func(wf *tinkv1.Workflow) dockerapi.Container {
		return dockerapi.Container{Name: ContainerName("fleetd-enroll"), Binds: []string{"/dev:/dev", WorkflowBind(wf)}}
	}

	t.Run("ok/its-own-container-runs", func(t *testing.T) {
		if out, code := g.run(context.Background(), container(own)); out != "ran\n" || code != 0 {
			t.Errorf("own container: %q, %d; want the runner's answer", out, code)
		}
		if err := g.err(); err != nil {
			t.Errorf("err after its own container: %v, want none", err)
		}
	})
	t.Run("refuse/another-workflow's-container", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		type answer struct {
			out  string
			code int
		}
		done := make(chan answer, 1)
		go func() {
			out, code := g.run(ctx, container(other))
			done <- answer{out, code}
		}()
		for g.err() == nil && len(done) == 0 { // until the guard noted the container (or answered it)
			runtime.Gosched()
		}
		cancel() // the engine closes
		a := <-done
		if a.code != 137 || !strings.Contains(a.out, "belongs to Workflow tink/m1-r2, and this machine runs Workflow tink/m1-r1") {
			t.Errorf("another Workflow's container: %q, %d; want 137 and a line naming both Workflows", a.out, a.code)
		}
		err := g.err()
		if !errors.Is(err, ErrOtherWorkflow) || !strings.Contains(err.Error(), "started container action_fleetd-enroll of Workflow tink/m1-r2 before Workflow tink/m1-r1 ended") {
			t.Errorf("err = %v, want ErrOtherWorkflow naming the container, its Workflow and the machine's", err)
		}
		if len(ran) != 1 {
			t.Errorf("the runner answered %v, want only the machine's own container", ran)
		}
	})
	t.Run("ok/binds-without-a-workflow-are-named", func(t *testing.T) {
		if got := boundWorkflow([]string{"/dev:/dev"}); got != "(binds /dev:/dev)" {
			t.Errorf("boundWorkflow = %q", got)
		}
	})
}

package tinkerbell

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// TestOwnContainers: the machine's runner answers only its Workflow's containers, told by the
// /workflow bind tink-worker v0.12.2 gives them or by the action id tink-agent v0.25 names them
// after, never another Workflow's container of the same action name, which is ended only with
// the engine (the worker reports nothing for it) and named.
func TestOwnContainers(t *testing.T) {
	workflow := func(name, actionID string) *Workflow {
		return &Workflow{ObjectMeta: metav1.ObjectMeta{Namespace: "tink", Name: name},
			Status: WorkflowStatus{Tasks: []Task{{Name: "t", Actions: []TaskAction{{ID: actionID, Name: "fleetd-enroll"}}}}}}
	}
	own, other := workflow("m1-r1", "01JOWN"), workflow("m1-r2", "01JOTHER")
	for _, v := range []Version{V025, V012} {
		t.Run(string(v), func(t *testing.T) {
			var ran []string
			ofAction := func(id string) string {
				if id == "01JOTHER" {
					return "tink/m1-r2"
				}
				return ""
			}
			g := newOwnContainers(own, v, ofAction, func(_ context.Context, c dockerapi.Container) (string, int) {
				ran = append(ran, c.Name)
				return "ran\n", 0
			})
			container := func(wf *Workflow) dockerapi.Container {
				a := Actions(wf)[0]
				c := dockerapi.Container{Name: v.Container(a), Binds: []string{"/dev:/dev"}}
				if v == V012 {
					c.Binds = append(c.Binds, WorkflowBind(wf))
				}
				return c
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
				want := "started container " + container(other).Name + " of Workflow tink/m1-r2 before Workflow tink/m1-r1 ended"
				if !errors.Is(err, ErrOtherWorkflow) || !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want ErrOtherWorkflow saying %q", err, want)
				}
				if len(ran) != 1 {
					t.Errorf("the runner answered %v, want only the machine's own container", ran)
				}
			})
		})
	}
	t.Run("ok/binds-without-a-workflow-are-named", func(t *testing.T) {
		if got := boundWorkflow([]string{"/dev:/dev"}); got != "(binds /dev:/dev)" {
			t.Errorf("boundWorkflow = %q", got)
		}
	})
	t.Run("ok/an-agent-container-of-no-workflow-is-named", func(t *testing.T) {
		g := newOwnContainers(own, V025, func(string) string { return "" }, nil)
		if got := g.whose(dockerapi.Container{Name: AgentContainerName("wipe", "01JNONE")}); got != "(none has action id 01JNONE)" {
			t.Errorf("whose = %q", got)
		}
	})
}

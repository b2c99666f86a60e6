package tinkerbell_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/kubeharness"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

const root = "../.."

// ran is what the engine's runner saw, in order.
type ran struct {
	mu   sync.Mutex
	runs []dockerapi.Container
}

// names are the actions of the containers run, in order.
func (r *ran) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n []string
	for _, c := range r.runs {
		n = append(n, actionName(c.Name))
	}
	return n
}

const template = `version: "0.1"
name: t
global_timeout: 600
tasks:
  - name: provision
    worker: "{{.device_1}}"
    volumes: ["/dev:/dev"]
    environment:
      FROM_TASK: "task"
    actions:
      - name: first
        image: docker.io/library/alpine:3.20
        timeout: 60
        command: ["/bin/sh", "-c", "echo first"]
        environment:
          FROM_ACTION: "{{.device_name}}"
      - name: second
        image: docker.io/library/alpine:3.20
        timeout: 60
      - name: third
        image: docker.io/library/alpine:3.20
        timeout: 60
`

// TestRealWorkerRunsWorkflow runs a Workflow through Tinkerbell's own programs (the version
// FLEETD_TINKERBELL selects: v0.25's tinkerbell and tink-agent by default, v0.12.2's
// tink-controller, tink-server and tink-worker in make test-compat), with the worker's containers
// run by dockerapi: the worker runs the actions in order with the task's and action's
// environment and the volumes the Template declares (v0.12.2's worker adds its /workflow, v0.25's
// agent nothing), each action's exit code decides its state, and a failure ends the Workflow at
// that action. RunWorker passes its runner only its Workflow's containers.
func TestRealWorkerRunsWorkflow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	version, err := tinkerbell.VersionFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := version.CRDDirs(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kubeharness.Start(ctx, kubeharness.Options{CRDDir: crds[0], MoreCRDDirs: crds[1:]})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	}()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	const ns = "tink-system"
	tb, err := tinkerbell.Start(ctx, tinkerbell.Options{Version: version, Root: root, Kubeconfig: kubeconfig, Namespace: ns, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stop Tinkerbell: %v", err)
		}
	}()
	defer func() {
		if t.Failed() {
			for _, l := range []string{"tinkerbell.log", "tink-controller.log", "tink-server.log", "tink-worker.log", "dockerapi.log"} {
				if b, err := os.ReadFile(filepath.Join(dir, l)); err == nil {
					t.Logf("%s:\n%s", l, b)
				}
			}
		}
	}()

	rec := &ran{}
	failAt := ""
	engineLog, err := os.Create(filepath.Join(dir, "dockerapi.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer engineLog.Close()
	socket := filepath.Join(dir, "docker.sock")
	engine, err := dockerapi.Start(socket, func(ctx context.Context, c dockerapi.Container) (string, int) {
		rec.mu.Lock()
		rec.runs = append(rec.runs, c)
		rec.mu.Unlock()
		switch actionName(c.Name) {
		case failAt:
			return "2 disks have serial S1; refusing to choose\n", 3
		case "hang":
			<-ctx.Done() // until the worker stops or removes the container
			return "stopped\n", 137
		}
		return "ran " + c.Name + "\n", 0
	}, zerolog.New(engineLog))
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	const mac = "3c:ec:ef:4c:4f:54"
	var worker *tinkerbell.Process
	if version == tinkerbell.V012 {
		worker, err = tinkerbell.StartWorker(ctx, tinkerbell.WorkerOptions{Binary: tb.Worker, ID: mac, Server: tb.Addr,
			DockerHost: engine.Host(), Log: filepath.Join(dir, "tink-worker.log")})
	} else {
		worker, err = tinkerbell.StartAgent(ctx, tinkerbell.AgentOptions{Binary: tb.Worker, ID: mac, Server: tb.Addr,
			DockerSocket: socket, Log: filepath.Join(dir, "tink-worker.log")})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := worker.Stop(); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	}()

	scheme, err := tinkerbell.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	data := template
	if err := c.Create(ctx, &tinkv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: ns}, Spec: tinkv1.TemplateSpec{Data: &data}}); err != nil {
		t.Fatal(err)
	}
	no := false
	hardware := func(name, mac string) *tinkv1.Hardware {
		hw := &tinkv1.Hardware{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: tinkv1.HardwareSpec{
			Interfaces: []tinkv1.Interface{{DHCP: &tinkv1.DHCP{MAC: mac}, Netboot: &tinkv1.Netboot{AllowPXE: &no, AllowWorkflow: &no}}}}}
		if err := c.Create(ctx, hw); err != nil {
			t.Fatal(err)
		}
		return hw
	}
	hw := hardware("node-a", mac)
	createFrom := func(t *testing.T, name, template, node, mac string) *tinkerbell.Workflow {
		t.Helper()
		wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: tinkv1.WorkflowSpec{TemplateRef: template,
			HardwareRef: node, HardwareMap: map[string]string{"device_1": mac, "device_name": node},
			BootOptions: tinkv1.BootOptions{ToggleAllowNetboot: true}}}
		if err := c.Create(ctx, wf); err != nil {
			t.Fatal(err)
		}
		return wf
	}
	create := func(t *testing.T, name, node, mac string) *tinkerbell.Workflow {
		t.Helper()
		return createFrom(t, name, "t", node, mac)
	}
	// run runs a Workflow of template on node-a to its end. The ended Workflow is deleted once
	// the row is done: v0.25's server lists every Workflow of the agent's id and refuses to serve
	// it when an ended one comes first (most of the time), which would slow the next rows.
	run := func(t *testing.T, name, template string) *tinkerbell.Workflow {
		t.Helper()
		wf := createFrom(t, name, template, "node-a", mac)
		t.Cleanup(func() { _ = c.Delete(context.Background(), wf.DeepCopy()) })
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
				t.Fatal(err)
			}
			if tinkerbell.Ended(wf) {
				return wf
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("Workflow %s is still %q after 90 s", name, wf.Status.State)
		return nil
	}
	actionStates := func(wf *tinkerbell.Workflow) string {
		var s []string
		for _, a := range tinkerbell.Actions(wf) {
			s = append(s, fmt.Sprintf("%s=%s", a.Name, tinkerbell.BareState(a.State)))
		}
		return strings.Join(s, " ")
	}
	// message is an action's message as the server stored it.
	message := func(wf *tinkerbell.Workflow, i int) string { return wf.Status.Tasks[0].Actions[i].Message }

	t.Run("ok/every-action-succeeds", func(t *testing.T) {
		wf := run(t, "wf-ok", "t")
		if got := actionStates(wf); tinkerbell.BareState(wf.Status.State) != "SUCCESS" || got != "first=SUCCESS second=SUCCESS third=SUCCESS" {
			t.Fatalf("state %s (%s), want SUCCESS with every action SUCCESS", wf.Status.State, got)
		}
		if got := rec.names(); !slices.Equal(got, []string{"first", "second", "third"}) {
			t.Errorf("containers run for actions %v, want first, second, third in order", got)
		}
		first := rec.runs[0]
		if want := version.Container(tinkerbell.Actions(wf)[0]); first.Name != want {
			t.Errorf("first action's container is %s, want %s (the name %s's worker gives it)", first.Name, want, version)
		}
		env := first.EnvMap()
		if env["FROM_TASK"] != "task" || env["FROM_ACTION"] != "node-a" || !slices.Equal(first.Cmd, []string{"/bin/sh", "-c", "echo first"}) {
			t.Errorf("first action: env %v, cmd %v; want the task's and the action's environment and its command", first.Env, first.Cmd)
		}
		// v0.12.2's worker binds a /workflow of its own into every action; v0.25's agent binds
		// only what the Template declares, so a Template's actions share nothing else.
		wantBinds := []string{"/dev:/dev"}
		if version == tinkerbell.V012 {
			wantBinds = append(wantBinds, tinkerbell.WorkflowBind(wf))
		}
		if !sameSet(first.Binds, wantBinds) || !first.Privileged {
			t.Errorf("first action: binds %v, privileged %t; want %v, privileged", first.Binds, first.Privileged, wantBinds)
		}
		cur := &tinkv1.Hardware{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(hw), cur); err != nil {
			t.Fatal(err)
		}
		if p := cur.Spec.Interfaces[0].Netboot.AllowPXE; p == nil || *p {
			t.Error("allowPXE is not false after the Workflow succeeded (the controller's post step)")
		}
	})
	t.Run("ok/an-action-fails", func(t *testing.T) {
		rec.mu.Lock()
		rec.runs, failAt = nil, "second"
		rec.mu.Unlock()
		wf := run(t, "wf-fail", "t")
		if got := actionStates(wf); tinkerbell.BareState(wf.Status.State) != "FAILED" || got != "first=SUCCESS second=FAILED third=PENDING" {
			t.Fatalf("state %s (%s), want FAILED at second, third PENDING", wf.Status.State, got)
		}
		// Neither version keeps the action's output: tink-worker v0.12.2 reports a failure with
		// no message (and tink-server keeps none), tink-agent v0.25 reports "action completed"
		// whatever the action printed. The reason is only in the worker's log.
		if m := message(wf, 1); m != "" && m != "action completed" {
			t.Errorf("the failed action's message is %q: want none, or v0.25's %q", m, "action completed")
		}
		if got := rec.names(); !slices.Equal(got, []string{"first", "second"}) {
			t.Errorf("containers run for actions %v, want first and second only", got)
		}
		// The output is kept where the engine logs the container's exit (tink-worker v0.12.2
		// fetches a container's logs only sometimes before it removes it).
		b, err := os.ReadFile(engineLog.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `,"exit_code":3,"output":"2 disks have serial S1; refusing to choose\n"`) {
			t.Errorf("the Docker API's log does not hold the failed container's exit code and output:\n%s", b)
		}
	})
	t.Run("ok/an-action-times-out", func(t *testing.T) {
		// An action that outlives its timeout ends the Workflow TIMEOUT at that action: the
		// worker gives up on its container (tink-agent v0.25 stops it, then removes it).
		hung := strings.Replace(strings.Replace(template, "name: second", "name: hang", 1), "timeout: 60\n      - name: third", "timeout: 2\n      - name: third", 1)
		if err := c.Create(ctx, &tinkv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "t-hang", Namespace: ns}, Spec: tinkv1.TemplateSpec{Data: &hung}}); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		rec.runs, failAt = nil, ""
		rec.mu.Unlock()
		wf := run(t, "wf-hang", "t-hang")
		if got := actionStates(wf); tinkerbell.BareState(wf.Status.State) != "TIMEOUT" || got != "first=SUCCESS hang=TIMEOUT third=PENDING" {
			t.Fatalf("state %s (%s), want TIMEOUT at hang, third PENDING", wf.Status.State, got)
		}
		if version == tinkerbell.V025 {
			b, err := os.ReadFile(engineLog.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`"path":"/containers/[0-9a-f]+/stop".*"container":"tinkerbell_hang_[^"]+","decision":"stopped"`).Match(b) {
				t.Errorf("the Docker API's log shows no stop of the hung container:\n%s", b)
			}
		}
	})
	t.Run("refuse/a-container-of-another-workflow", func(t *testing.T) {
		// RunWorker runs a worker for wf-mine whose id the server serves wf-theirs only (its
		// MAC): deterministically what a machine sees when the server serves its worker another
		// open Workflow first. Its container is not the machine's to answer: RunWorker stops
		// the worker and names it, and that Workflow's action is left RUNNING.
		const macB, macC = "3c:ec:ef:4c:4f:55", "3c:ec:ef:4c:4f:56"
		hardware("node-b", macB)
		hardware("node-c", macC)
		theirs := create(t, "wf-theirs", "node-b", macB)
		mine := create(t, "wf-mine", "node-c", macC)
		if err := tinkerbell.WaitPrepared(ctx, c, mine); err != nil {
			t.Fatal(err)
		}
		if err := tinkerbell.WaitPrepared(ctx, c, theirs); err != nil {
			t.Fatal(err)
		}
		var answered ran
		err = tinkerbell.RunWorker(ctx, c, mine, tinkerbell.RunOptions{Version: version, Worker: tb.Worker, Server: tb.Addr, ID: macB,
			Log: filepath.Join(dir, "tink-worker-b.log"), ControllerLog: tb.ControllerLog,
			Run: func(_ context.Context, ctr dockerapi.Container) (string, int) {
				answered.mu.Lock()
				answered.runs = append(answered.runs, ctr)
				answered.mu.Unlock()
				return "ran\n", 0
			}})
		theirFirst := version.Container(tinkerbell.Actions(theirs)[0])
		if !errors.Is(err, tinkerbell.ErrOtherWorkflow) || !strings.Contains(err.Error(), "container "+theirFirst+" of Workflow "+ns+"/wf-theirs before Workflow "+ns+"/wf-mine ended") {
			t.Errorf("RunWorker = %v, want ErrOtherWorkflow naming wf-theirs's container %s and wf-mine", err, theirFirst)
		}
		if got := answered.names(); len(got) != 0 {
			t.Errorf("the machine answered containers of actions %v, want none", got)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil {
			t.Fatal(err)
		}
		if tinkerbell.BareState(theirs.Status.State) != "RUNNING" || !strings.HasPrefix(actionStates(theirs), "first=RUNNING ") {
			t.Errorf("wf-theirs is %s (%s), want RUNNING at its first action, where the worker left it", theirs.Status.State, actionStates(theirs))
		}
	})
	t.Run("ok/the-quamina-replacement-is-reached-through-references-only", func(t *testing.T) {
		// Every row above ran Workflows through the controller, the server and the worker, and
		// none reached interop/quamina. A Hardware with spec.references makes v0.25's controller
		// apply its reference rules (quamina) when it renders a Workflow of it: the replacement is
		// reached and writes so into the log, which is what the development stack's tests count
		// (QuaminaCalls) to show that fleetd's flows never reach it; the Workflow still renders
		// (a reference the rules cannot allow is left out). v0.12.2 has no references (its CRD
		// drops the field) and no quamina.
		logs := []string{tb.ControllerLog, tb.ServerLog}
		if n, err := tinkerbell.QuaminaCalls(logs...); err != nil || n != 0 {
			t.Fatalf("before: %d calls of the quamina replacement (%v), want none", n, err)
		}
		hw := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
			"metadata": map[string]any{"name": "node-r", "namespace": ns},
			"spec": map[string]any{
				"interfaces": []any{map[string]any{"dhcp": map[string]any{"mac": "3c:ec:ef:4c:4f:58"},
					"netboot": map[string]any{"allowPXE": false, "allowWorkflow": false}}},
				"references": map[string]any{"bmc": map[string]any{"namespace": ns, "name": "node-r-bmc",
					"group": "bmc.tinkerbell.org", "version": "v1alpha1", "resource": "machines"}},
			}}}
		if err := c.Create(ctx, hw); err != nil {
			t.Fatal(err)
		}
		wf := create(t, "wf-refs", "node-r", "3c:ec:ef:4c:4f:58")
		if err := tinkerbell.WaitPrepared(ctx, c, wf); err != nil {
			t.Fatal(err)
		}
		n, err := tinkerbell.QuaminaCalls(logs...)
		if err != nil {
			t.Fatal(err)
		}
		if version == tinkerbell.V025 && n == 0 || version == tinkerbell.V012 && n != 0 {
			t.Errorf("Tinkerbell %s: %d calls of the quamina replacement once a Hardware had references, want some with v0.25, none with v0.12.2", version, n)
		}
	})
	t.Run("ok/hardware-created-late", func(t *testing.T) {
		// A Workflow whose Hardware is not there yet fails to render ("hardware not found"), and
		// the controller retries it with a backoff that doubles at each failure. WaitPrepared
		// nudges a Workflow left unrendered (an annotation), so it is prepared once the Hardware
		// exists, not at the controller's next retry, which can be minutes away. The Hardware is
		// created only once the nudge is seen.
		const macD = "3c:ec:ef:4c:4f:57"
		late := create(t, "wf-late", "node-d", macD)
		done := make(chan error, 1)
		go func() { done <- tinkerbell.WaitPrepared(ctx, c, late.DeepCopy()) }()
		seen := &tinkerbell.Workflow{}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(late), seen); err != nil {
				t.Fatal(err)
			}
			if _, ok := seen.Annotations["fleetsim.folly-infra/nudged"]; ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("WaitPrepared did not nudge Workflow wf-late, unrendered (state %q, templateRendering %q) for 30 s", seen.Status.State, seen.Rendering())
			}
		}
		if seen.Status.State != "" || seen.Rendering() != tinkv1.TemplateRenderingFailed {
			t.Errorf("wf-late nudged while state %q, templateRendering %q; want nudged only unrendered, its Hardware missing", seen.Status.State, seen.Rendering())
		}
		hardware("node-d", macD)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(late), late); err != nil {
			t.Fatal(err)
		}
		if tinkerbell.BareState(late.Status.State) != "PENDING" {
			t.Errorf("wf-late is %s once prepared, want PENDING", late.Status.State)
		}
	})
}

// sameSet says whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// actionName is the action a container of either version's worker runs: v0.12.2's
// "action_NAME", v0.25's "tinkerbell_NAME_ID".
func actionName(container string) string {
	if n, ok := strings.CutPrefix(container, "action_"); ok {
		return n
	}
	n := strings.TrimPrefix(container, "tinkerbell_")
	if i := strings.LastIndexByte(n, '_'); i >= 0 {
		n = n[:i]
	}
	return n
}

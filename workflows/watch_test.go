package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// recorder collects Watch callbacks.
type recorder struct {
	mu     sync.Mutex
	events []string // "<device id> <workflow> <phase> <current action>"
	added  chan struct{}
}

func newRecorder() *recorder { return &recorder{added: make(chan struct{}, 1000)} }

func (r *recorder) fn(id int64, ws fleet.WorkflowStatus) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf("%d %s %s %s", id, ws.Name, ws.Phase, ws.CurrentAction))
	r.mu.Unlock()
	r.added <- struct{}{}
}

// waitFor waits until an event equal to want was recorded (a guard, not a timing assertion).
func (r *recorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		r.mu.Lock()
		for _, ev := range r.events {
			if ev == want {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		select {
		case <-r.added:
		case <-deadline:
			t.Fatalf("no Watch callback %q; got %q", want, r.snapshot())
		}
	}
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// noRepeats fails when one Workflow's view was delivered twice in a row.
func (r *recorder) noRepeats(t *testing.T) {
	t.Helper()
	last := map[string]string{}
	for _, ev := range r.snapshot() {
		wf := strings.Fields(ev)[1]
		if last[wf] == ev {
			t.Errorf("callback %q delivered twice in a row; events %q", ev, r.snapshot())
		}
		last[wf] = ev
	}
}

func startWatch(t *testing.T, e *env) (*recorder, func()) {
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.in.Watch(ctx, rec.fn) }()
	return rec, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after its context ended, want nil", err)
		}
	}
}

// TestWatchReportsStatusChanges: Watch reports each change of a Workflow's status once, as the
// server records a worker's reports (written directly, setStatus, once in the other version's
// spelling) and the controller moves it on (v0.12.2's names the running action, v0.25's server
// records it; the post step to success).
func TestWatchReportsStatusChanges(t *testing.T) {
	e := newControlledEnv(t)
	rec, stop := startWatch(t, e)
	defer stop()
	wf, s := installed(t, e, "watched")
	name := s.Name
	rec.waitFor(t, "5 "+name+" waiting ")
	setStatus(t, e, wf, "RUNNING", map[string]string{"fleetd-enroll": "RUNNING"}, "", true)
	rec.waitFor(t, "5 "+name+" running ") // each controller reads only its own spelling, and each CRD drops the other's fields
	for _, step := range []struct {
		actions map[string]string
		state   string
		want    string
	}{
		{map[string]string{"fleetd-enroll": "RUNNING"}, "RUNNING", "running fleetd-enroll"},
		{map[string]string{"fleetd-enroll": "SUCCESS", "wipe": "RUNNING"}, "RUNNING", "running wipe"},
		{map[string]string{"wipe": "SUCCESS"}, "POST", "succeeded wipe"},
	} {
		setStatus(t, e, wf, step.state, step.actions, "")
		rec.waitFor(t, "5 "+name+" "+step.want)
	}
	rec.noRepeats(t)
}

// TestWatchSurvivesAPIServerRestart stops the API server under a running Watch and starts it
// again on the same data directory and port: the Watch reconnects and reports the change made
// after the restart, without repeating what it had already reported.
func TestWatchSurvivesAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1 := startServer(t, dir, 0)
	e := newEnvOn(t, s1.RESTConfig())
	withTinkerbell(t, s1, e)
	rec, stop := startWatch(t, e)
	defer stop()
	wf, s := installed(t, e, "restarted")
	rec.waitFor(t, "5 "+s.Name+" waiting ")
	setStatus(t, e, wf, "RUNNING", map[string]string{"fleetd-enroll": "RUNNING"}, "")
	rec.waitFor(t, "5 "+s.Name+" running fleetd-enroll") // the controller (v0.12.2) or the server (v0.25) names the running action

	if err := s1.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.in.Ping(ctx); err == nil {
		t.Error("Ping succeeded while the API server was stopped")
	}
	startServer(t, dir, portOf(t, s1.URL()))
	setStatus(t, e, wf, "FAILED", map[string]string{"fleetd-enroll": "FAILED"}, "")
	rec.waitFor(t, "5 "+s.Name+" failed fleetd-enroll")
	rec.noRepeats(t)
	if err := e.in.Ping(ctx); err != nil {
		t.Errorf("Ping after the restart: %v", err)
	}
}

func portOf(t *testing.T, url string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(url[strings.LastIndex(url, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return port
}
